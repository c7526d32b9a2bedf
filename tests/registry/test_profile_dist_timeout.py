"""slurm.dist_timeout_s: every profile states it, the default is torch's gloo timeout, and a value outside
[10 s, a day] is refused in one line naming the field and a value that works."""

import pytest

from exoformer.errors import UserError
from exoformer.registry.profiles import DIST_TIMEOUT_DEFAULT_S, SlurmProfile, list_profiles, load_profile
from exoformer.registry.registry import REPO_ROOT


def test_every_profile_states_its_collective_timeout():
    for name in list_profiles():
        source = load_profile(name).source
        assert "dist_timeout_s:" in (REPO_ROOT / source).read_text(), name
    assert SlurmProfile().dist_timeout_s == DIST_TIMEOUT_DEFAULT_S == 1800
    assert load_profile("h100").slurm.dist_timeout_s == 1800


@pytest.mark.parametrize("value, allowed", [(5, False), (10, True), (86_400, True), (86_401, False)])
def test_dist_timeout_bounds(value, allowed):
    overrides = {"slurm.dist_timeout_s": value}
    if allowed:
        assert load_profile("testcluster", overrides).slurm.dist_timeout_s == value
        return
    with pytest.raises(UserError) as err:
        load_profile("testcluster", overrides)
    line = err.value.render()
    assert "slurm.dist_timeout_s" in line and "\n" not in line
