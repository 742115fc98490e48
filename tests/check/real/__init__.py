"""Attention implementations copied from public repositories, each under its own license, with the
outcome per check decided from reading the code (tests/check/test_real_gallery.py runs them)."""


def check(target: dict):
    """The battery on one gallery target, with what it declares (convention, scale, soft cap, mask family, window)."""
    import attnroute as ar
    from attnroute.check.targets import Target

    t = Target(
        target["name"],
        target["fn"],
        target["convention"],
        mask_family=target.get("mask_family", "any"),
        scale=target.get("scale"),
        softcap=target.get("softcap"),
        window=target.get("window"),
        sinks=target.get("sinks", 0),
    )
    return ar.check(t)
