"""Every public function of the observables package has a runnable Example (the examples themselves
run with the doctests of attnflow/, which ``make test`` collects)."""


def test_every_public_observable_has_an_example():
    import attnflow.observables as obs

    missing = [n for n in obs.__all__ if callable(getattr(obs, n)) and not isinstance(getattr(obs, n), type)
               and "Example" not in (getattr(obs, n).__doc__ or "")]
    assert not missing
