"""Bad input: one clear error naming the argument, before anything is compiled."""

import re

import numpy as np
import pytest

import attnflow as af
from attnflow import InputError, NonFiniteError

I2 = np.eye(2)
X = np.random.default_rng(0).normal(size=(5, 2))


@pytest.mark.parametrize(
    "args,kwargs,pattern",
    [
        ((np.ones(5), I2, I2, I2), {}, r"x0 must be tokens \(n, d\), got shape \(5,\)"),
        ((np.ones((2, 3, 4, 2)), I2, I2, I2), {}, r"x0 must be tokens \(n, d\), got shape \(2, 3, 4, 2\)"),
        ((np.ones((3, 5, 2)), I2, I2, I2), {}, r"x0 must be tokens \(n, d\), got shape \(3, 5, 2\); if the leading axis of x0 is a batch .* batch=\('x0', ...\)"),
        ((X, I2, I2, np.ones((3, 2, 2))), {}, r"V must be a \(d, d\) matrix, got shape \(3, 2, 2\); .* AttentionWeights\(..., axes=...\)"),
        ((X, I2, I2, I2), {"batch": "V"}, r"V must be a \(d, d\) matrix with a leading batch axis B, got shape \(2, 2\)"),
        ((X, I2, I2, I2), {"batch": "Z"}, r"batch must name inputs among"),
        ((X, I2, I2, np.ones((2, 3))), {}, r"V must be square \(d, d\), got \(2, 3\)"),
        ((X, I2, I2, np.eye(3)), {}, r"tokens have dimension d = 2, so V must be \(2, 2\), got \(3, 3\)"),
        ((X, np.ones((3, 2)), np.ones((2, 2)), I2), {}, r"Q and K must have the same shape .* Q \(3, 2\) and K \(2, 2\)"),
        ((X, np.ones((3, 3)), np.ones((3, 3)), I2), {}, r"Q and K must have shape \(m, 2\)"),
        ((X, np.ones(2), I2, I2), {}, r"Q must be an \(m, d\) matrix, got shape \(2,\)"),
        ((np.where(np.eye(5, 2) > 0, np.nan, X), I2, I2, I2), {}, r"x0 contains 2 non-finite entries"),
        ((X, I2, I2, np.array([[1.0, np.inf], [0.0, 1.0]])), {}, r"V contains 1 non-finite entry"),
        ((X, I2, I2, I2), {"t1": -1.0}, r"t1 must be >= t0"),
        ((X, I2, I2, I2), {"t1": np.nan}, r"t0 and t1 must be finite"),
        ((X, I2, I2, I2), {"method": "euler", "dt": 0.0}, r"dt must be > 0, got 0.0"),
        ((X, I2, I2, I2), {"method": "euler", "dt": -0.5}, r"dt must be > 0"),
        ((X, I2, I2, I2), {"method": "euler"}, r"method='euler' .* needs a step dt"),
        ((X, I2, I2, I2), {"method": "euler", "dt": 0.3}, r"whole number of layers"),
        ((X, I2, I2, -I2), {"method": "euler", "dt": 1.0, "picture": "rescaled"}, r"I \+ dt\*V is singular"),
        ((X, I2, I2, I2), {"picture": "sphere"}, r"picture must be one of"),
        ((X, I2, I2, I2), {"method": "rk99"}, r"solver must be .* got 'rk99'"),
        ((X, I2, I2, I2), {"dtype": "float16"}, r"dtype must be 'float32' or 'float64'"),
        ((np.ones((3, 5, 2)), np.ones((4, 2, 2)), np.ones((4, 2, 2)), np.ones((4, 2, 2))), {"batch": "all"}, r"one batch size B, got x0: 3, Q: 4"),
        ((X, I2, I2, I2), {"ts": [0.0, 2.0, 1.0]}, r"ts must be a non-decreasing"),
        ((X, I2, I2, I2), {"beta": np.ones((2, 2))}, r"beta must be a scalar, got shape \(2, 2\)"),
        ((X, af.AttentionWeights(I2, I2, I2), I2, I2), {}, r"pass either an AttentionWeights"),
        ((X, af.AttentionWeights(I2, I2, I2)), {"beta": 2.0}, r"beta is part of the AttentionWeights"),
    ],
)
def test_bad_input_raises_one_clear_error(args, kwargs, pattern):
    kwargs = {"t1": 1.0, **kwargs}
    with pytest.raises(InputError, match=pattern) as info:
        af.simulate(*args, **kwargs)
    message = str(info.value)
    assert message.count(".") >= 1 and "\n" not in message


def test_errors_happen_before_compilation(monkeypatch):
    import attnflow._simulation as sim_mod

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("compiled before validating")

    monkeypatch.setattr(sim_mod, "_run", boom)
    with pytest.raises(InputError):
        af.simulate(X, I2, I2, np.eye(3), t1=1.0)


def test_overflow_is_reported_with_its_time_euler():
    # raw picture, V = 2I in float32: |x| ~ 3^k per layer (dt = 1) overflows near layer 40
    x0 = np.random.default_rng(1).normal(size=(6, 2))
    with pytest.raises(NonFiniteError, match=r"non-finite .* at t = (\d+)") as info:
        af.simulate(x0, I2, I2, 2 * I2, t1=100.0, method="euler", dt=1.0)
    t_bad = float(re.search(r"at t = ([\d.e+]+)", str(info.value)).group(1))
    # scores ~ |x|^2 ~ 9^k overflow float32 (3.4e38) once k ~ 40; states a little later
    assert 30 <= t_bad <= 90


def test_overflow_is_reported_with_its_time_adaptive():
    # raw picture, V = I in float32: scores ~ |x|^2 ~ e^{2t} overflow near t = 44, where the solve stops
    x0 = np.random.default_rng(1).normal(size=(6, 2))
    with pytest.raises(NonFiniteError, match=r"non-finite .* at t = ([\d.]+)") as info:
        af.simulate(x0, I2, I2, I2, t1=80.0, num_saves=81)
    assert 40 <= float(re.search(r"at t = ([\d.e+]+)", str(info.value)).group(1)) <= 46


def test_check_false_returns_flags_instead_of_raising():
    x0 = np.random.default_rng(1).normal(size=(6, 2))
    sim = af.simulate(x0, I2, I2, 2 * I2, t1=100.0, method="euler", dt=1.0, throw=False)
    assert not np.all(np.isfinite(np.asarray(sim.states[-1])))
