"""Attention implementations copied from public repositories, each under its own license, with the
outcome per check decided from reading the code (tests/check/test_real_gallery.py runs them)."""


def check(target: dict):
    """The battery on one gallery target, with what it declares (convention, scale, soft cap, mask family)."""
    import attnroute as ar

    return ar.check(
        target["fn"],
        target["convention"],
        name=target["name"],
        scale=target.get("scale"),
        softcap=target.get("softcap"),
        mask_family=target.get("mask_family", "any"),
    )
