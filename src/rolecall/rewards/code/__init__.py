"""Code rewards: hidden tests as data (spec) and a sandbox that runs model-written code."""
from rolecall.rewards.code.spec import CodeTests, TestSpecError, parse_tests

__all__ = ["CodeTests", "TestSpecError", "parse_tests"]
