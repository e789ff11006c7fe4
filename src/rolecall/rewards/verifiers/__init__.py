"""The built-in verifiers, one file each; each declares `VERIFIER = VerifierSpec(...)` and is found here."""
