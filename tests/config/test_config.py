"""Config composition: merge order, validation errors, saved-config round trip, hashing, profiles."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from lightning_docmt.config import composition as config
from lightning_docmt.config.composition import compose, config_hash, save_config, to_dataclass
from lightning_docmt.config.registry import ARCHS, ArchEntry
from lightning_docmt.config.schema import ModelConfig, RunConfig, StageConfig
from lightning_docmt.errors import DocMTInputError
from tests.helpers.stand_in_archs import CTX, SENT, CtxConfig, SentConfig, StandInModel

REAL_CONFIGS = config.CONFIG_DIR
SHARED_SIZE_NAMES = {"d_model", "heads", "ffn_dim", "enc_layers", "dec_layers", "dropout",
                     "attn_dropout", "relu_dropout", "max_positions"}


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def configs_dir(tmp_path, monkeypatch, stand_in_archs) -> Path:
    """A private configs/ tree in which every layer sets model sizes to its own number."""
    root = tmp_path / "configs"
    write_yaml(root / "base.yaml", {"model": {k: 1 for k in
                                              ("d_model", "heads", "ffn_dim", "enc_layers",
                                               "dec_layers", "max_positions")} | {"dropout": 0.01}})
    write_yaml(root / "arch" / f"{CTX}.yaml",
               {"model": {k: 2 for k in ("d_model", "heads", "ffn_dim", "enc_layers",
                                         "dec_layers", "context_layers")} | {"dropout": 0.02}})
    write_yaml(root / "profiles" / "small.yaml",
               {"model": {k: 3 for k in ("d_model", "heads", "ffn_dim", "enc_layers", "dec_layers")}})
    write_yaml(root / "profiles" / "other.yaml", {"model": {"dec_layers": 33}})
    monkeypatch.setattr(config, "CONFIG_DIR", root)
    return root


def test_merge_order_defaults_base_preset_profile_experiment_table_row_cli(configs_dir, tmp_path):
    experiment = write_yaml(tmp_path / "exp.yaml", {"model": {
        "arch": CTX, "d_model": 4, "heads": 4, "ffn_dim": 4, "enc_layers": 4}})
    cfg = compose(experiment, ["model.d_model=7"], profile="small",
                  table_base=["model.d_model=5", "model.heads=5", "model.ffn_dim=5"],
                  row_overrides=["model.d_model=6", "model.heads=6"])
    assert cfg.model.d_model == 7  # command line
    assert cfg.model.heads == 6  # row
    assert cfg.model.ffn_dim == 5  # table base
    assert cfg.model.enc_layers == 4  # experiment YAML
    assert cfg.model.dec_layers == 3  # profile
    assert cfg.model.dropout == 0.02 and cfg.model.context_layers == 2  # arch preset
    assert cfg.model.max_positions == 1  # base.yaml
    assert cfg.model.attn_dropout == ModelConfig().attn_dropout  # dataclass default
    assert cfg.profile == "small"


def test_the_last_layer_setting_model_arch_chooses_schema_and_preset(configs_dir, tmp_path):
    experiment = write_yaml(tmp_path / "exp.yaml", {"model": {"arch": CTX}})
    cfg = compose(experiment, [f"model.arch={SENT}"])
    assert cfg.model.arch == SENT
    assert "context_layers" not in cfg.model  # SentConfig schema
    assert cfg.model.dropout == 0.01  # base.yaml only: the CTX preset was not applied
    assert type(to_dataclass(cfg).model) is SentConfig


def test_profile_from_key_unless_the_argument_names_one(configs_dir, tmp_path):
    experiment = write_yaml(tmp_path / "exp.yaml", {"profile": "small", "model": {"arch": SENT}})
    from_key = compose(experiment, [])
    assert (from_key.profile, from_key.model.dec_layers) == ("small", 3)
    from_argument = compose(experiment, [], profile="other")
    assert (from_argument.profile, from_argument.model.dec_layers) == ("other", 33)
    assert from_argument.model.d_model == 1  # `small` was not applied at all
    for no_profile in (compose(None, [f"model.arch={SENT}"]), compose(experiment, ["profile=null"])):
        assert no_profile.profile is None and no_profile.model.dec_layers == 1


def test_unknown_key_in_yaml_names_file_line_key_and_closest(configs_dir, tmp_path):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(f"model:\n  arch: {CTX}\n  context_layres: 3\n")
    with pytest.raises(DocMTInputError) as err:
        compose(experiment, [])
    message = str(err.value)
    assert message.startswith(f"{experiment}:3:")
    assert "model.context_layres" in message and "'context_layers'" in message


def test_wrong_type_on_command_line_names_key_type_and_override(configs_dir):
    with pytest.raises(DocMTInputError) as err:
        compose(None, [f"model.arch={SENT}", "model.d_model=big"])
    message = str(err.value)
    assert "model.d_model" in message and "expected int" in message
    assert "command line override 'model.d_model=big'" in message


@pytest.mark.parametrize("override, expected", [
    ("modle.d_model=3", "'model'"),
    ("train.optim.warmup_step=10", "'warmup_steps'"),
    ("model.context_layers=2", f"model.arch '{SENT}'"),
])
def test_unknown_keys_suggest_valid_names(configs_dir, override, expected):
    with pytest.raises(DocMTInputError) as err:
        compose(None, [f"model.arch={SENT}", override])
    assert expected in str(err.value) and override in str(err.value)


def test_trainer_is_a_free_mapping_and_stages_can_be_added(configs_dir):
    cfg = compose(None, [f"model.arch={SENT}", "trainer.gradient_clip_val=0.5",
                         "trainer.limit_val_batches=0.25", "train.stages.doc.trainable=[context.*]",
                         "train.stages.doc.init_from=main", "train.schedule=[main,doc]"])
    assert cfg.trainer.gradient_clip_val == 0.5 and cfg.trainer.limit_val_batches == 0.25
    assert list(cfg.train.schedule) == ["main", "doc"]
    assert to_dataclass(cfg).train.stages["doc"] == StageConfig(trainable=["context.*"],
                                                                init_from="main")


@pytest.mark.parametrize("overrides, expected", [
    (["train.schedule=[main,dco]"], "stage 'dco'"),
    (["train.stages.main.data.corpsu=jsonl:x"], "did you mean corpus"),
    (["train.stages.main.arch=nope"], "train.stages.main.arch"),
    (["train.stages.main.optim.warmup=5"],
     "key 'train.stages.main.optim.warmup': not a train.optim.* key; did you mean warmup_steps"),
    (["train.optim.schedule=linear_warmup_inverse_sqr"], "did you mean linear_warmup_inverse_sqrt"),
    (["train.stages.main.optim.schedule=cosine"],
     "key 'train.stages.main.optim.schedule': unknown lr schedule 'cosine'"),
    (["train.stages.main.lr=1e-3", "train.stages.main.optim.lr=2e-3"], "the stage's lr is set twice"),
    ([f"model.arch={CTX[:-1]}z"], f"did you mean {CTX}"),
    (["profile=smal"], "did you mean small"),
    (["model.d_model"], "expected key=value"),
    (["train.optim.betas=0.9"], "expected list[float]"),
])
def test_invalid_configs_fail_at_compose_time(configs_dir, overrides, expected):
    with pytest.raises(DocMTInputError) as err:
        compose(None, [f"model.arch={SENT}", *overrides])
    assert expected in str(err.value)


def test_a_table_file_is_not_a_run_config(configs_dir, tmp_path):
    table = write_yaml(tmp_path / "t.yaml", {"id": "t", "rows": [{"name": "a"}]})
    with pytest.raises(DocMTInputError, match="--row"):
        compose(table, [])


def test_saved_config_round_trips_even_when_presets_change(configs_dir, tmp_path):
    experiment = write_yaml(tmp_path / "exp.yaml", {"model": {"arch": CTX, "gating": False}})
    cfg = compose(experiment, ["trainer.max_epochs=3", "train.stages.doc.lr=0.5",
                               "train.schedule=[main,doc]", "data.test=null",
                               "eval.contrastive=[a.jsonl,b.jsonl]"], profile="small")
    saved = save_config(cfg, tmp_path / "run")
    assert saved == tmp_path / "run" / "config.yaml"
    again = compose(saved, [])
    assert again == cfg and OmegaConf.to_yaml(again) == OmegaConf.to_yaml(cfg)
    # Presets and profiles edited after the run must not leak into the saved run.
    write_yaml(configs_dir / "base.yaml", {"model": {"max_positions": 99}, "trainer": {"x": 1}})
    write_yaml(configs_dir / "profiles" / "small.yaml", {"model": {"d_model": 99}})
    assert compose(saved, []) == cfg
    assert compose(saved, ["model.dropout=0.3"]).model.dropout == 0.3
    with pytest.raises(DocMTInputError, match="already resolved"):
        compose(saved, [], profile="other")


def test_to_dataclass_gives_typed_objects_with_the_arch_config(configs_dir):
    run = to_dataclass(compose(None, [f"model.arch={CTX}", "model.context_layers=4"]))
    assert isinstance(run, RunConfig) and type(run.model) is CtxConfig
    assert run.model.context_layers == 4 and run.model.gating is True
    assert isinstance(run.train.stages["main"], StageConfig)


def test_config_hash_is_canonical_json_sha256(configs_dir, tmp_path):
    cfg = compose(None, [f"model.arch={CTX}"])
    plain = OmegaConf.to_container(cfg.model)
    reordered = dict(reversed(list(plain.items())))
    expected = hashlib.sha256(json.dumps(plain, sort_keys=True, separators=(",", ":"))
                              .encode()).hexdigest()[:16]
    assert config_hash(cfg.model) == config_hash(reordered) == expected
    assert config_hash(to_dataclass(cfg).model) == expected
    assert config_hash(compose(save_config(cfg, tmp_path), []).model) == expected
    cfg.model.d_model += 1
    assert config_hash(cfg.model) != expected


# The shipped lightning_docmt/config/ tree -------------------------------------------------------------------

def load_real(relative: str) -> dict:
    return yaml.safe_load((REAL_CONFIGS / relative).read_text()) or {}


@pytest.mark.parametrize("profile", ["tiny", "cpu", "paper"])
def test_profiles_apply_to_any_arch(stand_in_archs, profile):
    data = load_real(f"profiles/{profile}.yaml")
    assert set(data) <= {"model", "vocab", "data", "train", "decode", "eval", "logging", "trainer"}
    assert set(data.get("model", {})) <= SHARED_SIZE_NAMES  # never model.arch or arch options
    for arch in (SENT, CTX):
        cfg = compose(None, [f"model.arch={arch}"], profile=profile)
        assert cfg.profile == profile
        for key, value in data.get("model", {}).items():
            assert cfg.model[key] == value


def test_tiny_profile_is_test_sized(stand_in_archs):
    cfg = compose(None, [f"model.arch={CTX}"], profile="tiny")
    assert 32 <= cfg.model.d_model <= 64 and max(cfg.model.enc_layers, cfg.model.dec_layers) <= 2
    assert 300 <= cfg.vocab.size <= 1000 and 0 < cfg.train.max_steps <= 100
    assert cfg.model.d_model % cfg.model.heads == 0


def test_cpu_profile_is_a_small_transformer(stand_in_archs):
    cfg = compose(None, [f"model.arch={SENT}"], profile="cpu")
    assert (cfg.model.d_model, cfg.model.ffn_dim, cfg.model.heads) == (192, 768, 4)
    assert (cfg.model.enc_layers, cfg.model.dec_layers, cfg.vocab.size) == (2, 2, 8000)
    assert 1e-3 <= cfg.train.optim.lr <= 2e-3 and cfg.train.optim.schedule != "inverse_sqrt"
    # bounded in steps (machine-independent results), the last step validated
    assert cfg.train.max_steps > 0 and cfg.train.max_time_minutes is None
    assert cfg.train.max_steps % cfg.train.val_every_steps == 0


def test_paper_scale_is_transformer_base_and_leaves_presets_alone(stand_in_archs):
    paper = load_real("profiles/paper.yaml")
    # Profiles merge after presets: a paper profile setting these would overwrite the presets.
    assert "model" not in paper and "optim" not in paper.get("train", {})
    assert "max_tokens" not in paper.get("data", {}) and "size" not in paper.get("vocab", {})
    cfg = compose(None, [f"model.arch={SENT}"], profile="paper")
    model = cfg.model
    assert (model.d_model, model.ffn_dim, model.heads, model.enc_layers, model.dec_layers,
            model.dropout) == (512, 2048, 8, 6, 6, 0.1)
    assert (cfg.vocab.size, cfg.vocab.joint, cfg.train.optim.warmup_steps,
            cfg.data.max_tokens) == (32000, True, 4000, 6000)


@pytest.mark.parametrize("preset", sorted(p.stem for p in (REAL_CONFIGS / "arch").glob("*.yaml")))
def test_no_preset_sets_model_arch(preset):
    assert "arch" not in load_real(f"arch/{preset}.yaml").get("model", {})


def test_concat_preset_reads_one_previous_sentence_at_every_profile(monkeypatch):
    monkeypatch.setitem(ARCHS, "concat", ArchEntry("concat", SentConfig, StandInModel))
    for profile in (None, "tiny", "cpu", "paper"):
        cfg = compose(None, ["model.arch=concat"], profile=profile)
        assert (cfg.context.prev_sentences, cfg.context.side) == (1, "source")
