"""Settings: env vars, CLI flags that mirror them, and a README that lists every one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import build_parser, settings_from_args
from gateway.config import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_is_documented_in_the_readme(name: str) -> None:
    assert f"`GATEWAY_{name.upper()}`" in README
    assert f"`--{name.replace('_', '-')}`" in README


def test_env_vars_and_flags_map_to_the_same_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_PORT", "9001")
    monkeypatch.setenv("GATEWAY_TRITON_URL", "triton:8001")
    monkeypatch.setenv("GATEWAY_CORS_ORIGINS", '["https://a.example"]')
    settings = settings_from_args(["--triton-url", "other:9", "--embedded", "--cors-origins", "https://b,https://c"])
    assert settings.port == 9001  # from the environment
    assert settings.triton_url == "other:9"  # a flag wins
    assert settings.embedded is True
    assert settings.cors_origins == ["https://b", "https://c"]


def test_every_field_has_a_flag_and_a_docstring() -> None:
    flags = {a.dest for a in build_parser()._actions}
    for name, field in Settings.model_fields.items():
        assert name in flags
        assert field.description, f"{name} needs a docstring: it is the configuration reference"


def test_api_keys_from_env_list_and_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# comment\n k1 \n\nk2\n")
    settings = Settings(api_keys="a, b,", api_key_file=keys)
    assert settings.load_api_keys() == {"a", "b", "k1", "k2"}


def test_invalid_values_are_refused() -> None:
    with pytest.raises(ValueError):
        Settings(port=70000)
    with pytest.raises(ValueError):
        Settings(lora_separator="")


@pytest.mark.parametrize("url", ["localhost:8001", "triton.ns.svc.cluster.local:8001", "10.0.0.7:8001", "[::1]:8001"])
def test_triton_url_takes_host_and_port(url: str) -> None:
    assert Settings(triton_url=url).triton_url == url


@pytest.mark.parametrize(
    "url", ["a:8001,b:8002", "dns:///triton-headless.llm.svc.cluster.local:8001", "a:8001, dns:///b:8001"]
)
def test_triton_url_takes_several_endpoints_and_dns_names(url: str) -> None:
    assert Settings(triton_url=url).triton_endpoints


@pytest.mark.parametrize(
    "url", ["localhost", "dns://triton:8001", "grpc://triton:8001", "triton:port", "a:8001,b", "dns:///x", "a:0"]
)
def test_triton_url_that_is_not_host_and_port_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        Settings(triton_url=url)


@pytest.mark.parametrize("url", ["", " , "])
def test_triton_url_with_no_endpoint_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="no endpoint"):
        Settings(triton_url=url)
