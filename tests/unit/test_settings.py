"""Operator settings come from the chart's operator.yaml, with env overrides."""

from longctx_operator.render.settings import OperatorSettings


def test_defaults_without_config():
    assert OperatorSettings.from_env({}).trainer_image.startswith("ghcr.io/longctx/longctx-trainer")


def test_chart_config_file_and_env_override(tmp_path):
    config = tmp_path / "operator.yaml"
    config.write_text("trainerImage: registry.example/trainer:1.2\n"
                      "trainerImagePullPolicy: Always\nwatchNamespaces: [a]\n")
    settings = OperatorSettings.from_env({"LONGCTX_OPERATOR_CONFIG": str(config)})
    assert settings.trainer_image == "registry.example/trainer:1.2"
    assert settings.trainer_image_pull_policy == "Always"
    overridden = OperatorSettings.from_env({"LONGCTX_OPERATOR_CONFIG": str(config),
                                            "LONGCTX_TRAINER_IMAGE": "local/trainer:dev"})
    assert overridden.trainer_image == "local/trainer:dev"
