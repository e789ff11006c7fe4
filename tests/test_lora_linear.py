"""The fused frozen-linear + LoRA node gives PEFT's arithmetic: outputs and every gradient."""
import pytest
import torch

from rolecall.policies.lora_linear import fusable, lora_linear


def _reference(x, base, A, B, s):
    return base(x) + (x @ A.t()) @ B.t() * s


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("shape", [(5, 7, 12), (9, 12), (2, 3, 4, 12)])
def test_matches_separate_modules(bias, x_grad, shape):
    torch.manual_seed(0)
    base = torch.nn.Linear(12, 10, bias=bias).double().requires_grad_(False)
    A = torch.randn(4, 12, dtype=torch.double, requires_grad=True)
    B = torch.randn(10, 4, dtype=torch.double, requires_grad=True)
    x = torch.randn(*shape, dtype=torch.double, requires_grad=x_grad)
    g = torch.randn(*shape[:-1], 10, dtype=torch.double)
    assert fusable(base, torch.nn.Identity(), x, A, B)

    got = lora_linear(x, base, A, B, 0.5)
    want = _reference(x, base, A, B, 0.5)
    torch.testing.assert_close(got, want)
    inputs = [t for t in (x, A, B) if t.requires_grad]
    got_g = torch.autograd.grad(got, inputs, g)
    want_g = torch.autograd.grad(want, inputs, g)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b)
    assert got.shape == want.shape


def test_gradcheck():
    torch.manual_seed(1)
    base = torch.nn.Linear(6, 5).double().requires_grad_(False)
    A = torch.randn(2, 6, dtype=torch.double, requires_grad=True)
    B = torch.randn(5, 2, dtype=torch.double, requires_grad=True)
    x = torch.randn(3, 4, 6, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, A, B: lora_linear(x, base, A, B, 2.0), (x, A, B))


def test_frozen_adapter_gets_no_gradient():
    base = torch.nn.Linear(6, 5).requires_grad_(False)
    A, B = torch.randn(2, 6), torch.randn(5, 2)
    x = torch.randn(4, 6, requires_grad=True)
    y = lora_linear(x, base, A, B, 1.0)
    (gx,) = torch.autograd.grad(y.sum(), [x])
    torch.testing.assert_close(gx, torch.autograd.grad(_reference(x, base, A, B, 1.0).sum(), [x])[0])


def test_not_fusable_where_arithmetic_differs():
    base = torch.nn.Linear(6, 5).requires_grad_(False)
    A, B, x = torch.randn(2, 6), torch.randn(5, 2), torch.randn(4, 6)
    assert not fusable(base, torch.nn.Dropout(0.1), x, A, B)  # dropout on the adapter's input
    assert not fusable(base, torch.nn.Identity(), x.double(), A, B)  # mixed dtypes
    trained = torch.nn.Linear(6, 5)  # a base weight that trains needs its own gradient
    assert not fusable(trained, torch.nn.Identity(), x, A, B)

    class Quantized(torch.nn.Linear):
        pass

    assert not fusable(Quantized(6, 5).requires_grad_(False), torch.nn.Identity(), x, A, B)
