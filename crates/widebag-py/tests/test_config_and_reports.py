"""Config, explain and plan: the command line's keys, validation and reports."""

import json

import pytest

import widebag
from conftest import REPO


def test_a_config_round_trips_its_keys_and_files():
    c = widebag.Config(train={"epochs": 3}, model={"hidden": [64, 32]})
    assert c.get("train.epochs") == 3
    assert c.get("model.hidden") == [64, 32]
    c.set("train.batch_size", 128).set("optim.lr", 0.005)
    assert c.get("train.batch_size") == 128 and c.get("optim.lr") == 0.005
    again = widebag.Config(**{"train.epochs": 3, "model.hidden": [64, 32], "train.batch_size": 128, "optim.lr": 0.005})
    assert again.to_toml() == c.to_toml()
    f = widebag.Config.from_toml(REPO / "configs" / "gowalla.toml")
    assert f.get("data.format") == "lightgcn" and f.get("model.dim") == 600
    assert f.unset("data.test_path").get("data.test_path") is None
    assert "train.epochs" in widebag.Config.keys()


def test_a_bad_key_or_value_raises_value_error_naming_the_key():
    with pytest.raises(ValueError, match="train.epoch"):
        widebag.Config(train={"epoch": 3})
    c = widebag.Config()
    with pytest.raises(widebag.ConfigError, match="train.batch_size"):
        c.set("train.batch_size", 0)
    assert c.get("train.batch_size") != 0, "a refused set leaves the config as it was"
    with pytest.raises(KeyError):
        c.get("train.nonsense")
    with pytest.raises(ValueError):
        c.set("optim.lr", float("nan"))


def test_explain_is_the_command_lines_json(cli):
    c = widebag.Config(model={"dim": 32}, train={"batch_size": 64})
    ledger = widebag.explain(c, device="cpu")
    expected = cli("explain", *c.args(), "--device", "cpu", "--json")
    # The device's ledger is the same; the host side's process baseline and what reading the data
    # freed are measured of each process (the interpreter's heap here, the binary's there).
    ours, theirs = dict(ledger), dict(expected)
    host, cli_host = ours.pop("host"), theirs.pop("host")
    assert ours == theirs
    measured = {"baseline_bytes", "retained_bytes"}
    facts = {k: v for k, v in host["side"]["facts"].items() if k not in measured}
    assert facts == {k: v for k, v in cli_host["side"]["facts"].items() if k not in measured}
    assert "peak" in repr(ledger).lower()


def test_plan_is_the_command_lines_json_and_refuses_with_its_plan(cli):
    c = widebag.Config()
    p = widebag.plan(c, budget="64MiB", device="cpu")
    expected = cli("plan", "--budget", "64MiB", "--device", "cpu", "--json")
    assert dict(p) == expected
    with pytest.raises(widebag.DoesNotFit) as e:
        widebag.plan(c, budget="1KiB", device="cpu")
    assert e.value.plan is not None and e.value.plan["fits"] is False
    assert "1 KiB" in str(e.value) or "1KiB" in str(e.value) or "budget" in str(e.value)
