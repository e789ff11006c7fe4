"""Code rewards: hidden tests as data (spec) and a sandbox that runs model-written code."""
from rolecall.rewards.code.extract import extract_code
from rolecall.rewards.code.grade import grade_code
from rolecall.rewards.code.sandbox import CodeSandbox, SandboxLimits, SandboxUnavailable
from rolecall.rewards.code.spec import CodeTests, TestSpecError, parse_tests

__all__ = ["CodeSandbox", "CodeTests", "SandboxLimits", "SandboxUnavailable", "TestSpecError", "extract_code",
           "grade_code", "parse_tests"]
