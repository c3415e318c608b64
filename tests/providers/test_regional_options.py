"""The options Alibaba's and Tencent's adapters share (providers._regional.RegionalOptions):
taken by keyword, a misspelt one refused by the constructor and by the CLI's -o check."""

from __future__ import annotations

import pytest

from providers.alibaba import AlibabaProvider
from providers.tencent import TencentProvider
from provisioner.cli.checks import check_provider

CREDS = {"alibaba": ("AKID-test", "secret-test"), "tencent": ("AKID-test", "secret-test")}
CLASSES = {"alibaba": AlibabaProvider, "tencent": TencentProvider}


@pytest.mark.parametrize("name", ["alibaba", "tencent"])
def test_shared_options_are_taken(name: str) -> None:
    prov = CLASSES[name](
        credentials=CREDS[name],
        regions=["r-1", "r-2"],
        endpoint="http://127.0.0.1:9",
        image_id="img-1",
        currency="CNY",
        cny_to_usd=0.5,
        fx_rates={"EUR": 1.25},
        package_spec="provisioner==9.9",
        pip_args=["--no-index"],
    )
    assert prov.regions == ["r-1", "r-2"] and prov.client.default_region == "r-1"
    assert (prov.client.endpoint, prov.client.protocol) == ("127.0.0.1:9", "http")
    assert prov.client.image_id == "img-1" and prov.client.package_spec == "provisioner==9.9"
    assert prov.client.pip_args == ["--no-index"]
    assert prov.client.account.to_usd(10.0) == pytest.approx(5.0)
    assert "secret-test" not in repr(prov)


@pytest.mark.parametrize("name", ["alibaba", "tencent"])
def test_a_misspelt_option_is_refused(name: str) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'regoin'"):
        CLASSES[name](credentials=CREDS[name], regoin="r-1")  # type: ignore[call-arg]


@pytest.mark.parametrize("name", ["alibaba", "tencent"])
def test_cli_option_check_knows_the_shared_options(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    check_provider(name, {"region": "r-1", "cny_to_usd": 0.14})  # no exit: both are options
    with pytest.raises(SystemExit) as exc:
        check_provider(name, {"regoin": "r-1"})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"-o regoin: not an option of the {name} provider" in err
    assert "cny_to_usd" in err and "region" in err
