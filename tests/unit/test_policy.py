import pytest

from hyperpod_dhc.deephealth.domain.policy import ConfigError, Mode, NodeRecovery, Recovery, parse_config


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


def test_overrides_merge_nested_objects_key_by_key_and_cluster_overrides_apply_per_cluster():
    config = parse_config(
        {
            "defaults": {"replace_budget": {"max_nodes": 10, "max_pct": 20, "window_h": 12}},
            "groups": {"gpu": {"replace_budget": {"max_nodes": 2}, "dry_run": True}},
            "cluster_overrides": {"prod": {"breaker": {"max_failures": 5}}},
        }
    )
    budget = config.policy_for("any", "gpu").replace_budget
    assert (budget.max_nodes, budget.max_pct, budget.window_h) == (2, 20, 12)
    assert config.policy_for("any", "gpu").dry_run and not config.policy_for("any", "cpu").dry_run
    prod, other = config.cluster_policy("prod").breaker, config.cluster_policy("dev").breaker
    assert (prod.max_failures, prod.max_failure_pct) == (5, 50) and other.max_failures is None


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"defaults": {"recovery": "none", "ladder": ["reboot"]}}, "ladder has no effect"),
        ({"groups": {"g": {"recovery": "replace", "ladder": ["reboot"]}}}, "ladder reboots"),
        ({"defaults": {"ladder": ["reboot", "rescue"]}}, "defaults.ladder"),
        ({"defaults": {"replace_budget": {"max_pct": 150}}}, "defaults.replace_budget.max_pct"),
        ({"defaults": {"max_out_of_service_pct": 0}}, "defaults.max_out_of_service_pct"),
        ({"defaults": {"notify": ["node-exploded"]}}, "defaults.notify"),
        ({"defaults": {"notify_route": "has space"}}, "defaults.notify_route"),
        ({"cluster_defaults": {"breaker": {"window_h": 0}}}, "cluster_defaults.breaker.window_h"),
        ({"cluster_overrides": {"bad/name": {}}}, "cluster_overrides"),
    ],
)
def test_bad_safety_policy_names_the_key(raw, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        parse_config(raw)


def test_the_ladder_follows_recovery_and_max_attempts_unless_given():
    from hyperpod_dhc.deephealth.domain.policy import GroupPolicy

    assert GroupPolicy().steps() == ("reboot", "replace")
    assert GroupPolicy(recovery=Recovery.REPLACE, max_attempts=3).steps() == ("replace",) * 3
    assert GroupPolicy(ladder=("reboot", "reboot", "replace"), max_attempts=2).steps() == ("reboot", "reboot")
    assert GroupPolicy(max_attempts=0).steps() == ()


def test_the_stored_configuration_reads_back_to_the_same_policies():
    raw = {
        "defaults": {"max_attempts": 5, "replace_budget": {"max_nodes": 9}},
        "groups": {"gpu": {"recovery": "replace"}},
        "cluster_defaults": {"breaker": {"min_verdicts": 4}},
        "cluster_overrides": {"prod": {"breaker": {"max_failures": 2}}},
    }
    config = parse_config(raw)
    again = parse_config(config.model_dump(mode="json"))  # what the SSM parameter holds
    assert again.policy_for("c", "gpu") == config.policy_for("c", "gpu")
    assert again.policy_for("c", "gpu").max_attempts == 5, "an override must not reset the defaults it left out"
    assert again.cluster_policy("prod") == config.cluster_policy("prod")
    assert again.cluster_policy("prod").breaker.min_verdicts == 4


def test_node_recovery_is_hyperpods_spelling_and_equal_to_the_strings_describe_cluster_returns():
    assert NodeRecovery("Automatic") is NodeRecovery.AUTOMATIC and NodeRecovery("None") is NodeRecovery.NONE
    assert NodeRecovery.AUTOMATIC == "Automatic" and NodeRecovery.NONE == "None"
    assert str(NodeRecovery.NONE) == "None"  # audit reasons and logs show HyperPod's own value
    assert [m.value for m in NodeRecovery] == ["Automatic", "None"]
    with pytest.raises(ValueError):
        NodeRecovery("automatic")  # our Recovery.AUTO ("auto") is the group's policy, not the cluster's setting
