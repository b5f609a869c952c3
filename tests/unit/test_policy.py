import pytest

from deephealth.domain.policy import ConfigError, Mode, Recovery, parse_config


def test_defaults_are_valid_and_watch_every_cluster():
    config = parse_config({})
    assert config.clusters == "all" and config.watches("anything")
    assert config.defaults.mode == Mode.ON_DEMAND


def test_group_override_then_cluster_group_override_wins():
    config = parse_config(
        {
            "clusters": ["a", "b"],
            "groups": {"gpu": {"recovery": "replace", "max_attempts": 1}, "a/gpu": {"max_attempts": 3}},
        }
    )
    assert config.policy_for("a", "gpu").recovery == Recovery.REPLACE
    assert config.policy_for("a", "gpu").max_attempts == 3
    assert config.policy_for("b", "gpu").max_attempts == 1
    assert config.policy_for("b", "cpu").recovery == Recovery.REBOOT_THEN_REPLACE
    assert not config.watches("c")


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"clusterz": ["a"]}, "clusterz"),
        ({"defaults": {"mode": "sometimes"}}, "defaults.mode"),
        ({"defaults": {"checks": ["Bogus"]}}, "defaults.checks"),
        ({"defaults": {"checks": []}}, "defaults.checks"),
        ({"defaults": {"poll_interval_s": 1}}, "defaults.poll_interval_s"),
        ({"groups": {"a/b/c": {}}}, "groups key"),
        ({"groups": {"g": {"recover": "none"}}}, "groups.g.recover"),
        ({"clusters": []}, "clusters"),
        ({"max_round_nodes": 50000}, "max_round_nodes"),
    ],
)
def test_bad_config_names_the_key(raw, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        parse_config(raw)
