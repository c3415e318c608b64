"""Build provisioner/data/commitments.csv: commitment prices for the GPU types in offers.csv.

* AWS: Reserved Instance prices (standard and convertible, 1 and 3 years, all/partial/no
  upfront) from the ec2instances.info GPU snapshot of 2025-11-30 in the shared data folder.
  Savings Plans are not in that snapshot: an EC2 Instance Savings Plan is given the standard
  RI no-upfront rate and a Compute Savings Plan the convertible RI no-upfront rate (AWS prices
  them alike), labelled as proxies in the source column.
* GCP: resource-based committed-use prices (1 and 3 years, monthly, no upfront) from
  Cyclenerd's price list of 2026-07-30 (``month_1y``/``month_3y`` over 730 hours).
* Azure, Tencent, Alibaba: no real commitment price was at hand; the cloud's published
  discount rate for the term times the catalog's on-demand price, labelled as such.

The shared data folder is ``../shared/data`` next to the repository, or
``$PROVISIONER_SHARED_DATA``. Usage: ``python tools/build_commitments.py [--check]``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, installed or not

from provisioner.catalog_files import COMMITMENT_COLUMNS  # noqa: E402

OFFERS = ROOT / "provisioner" / "data" / "offers.csv"
OUT = ROOT / "provisioner" / "data" / "commitments.csv"
COLUMNS = list(COMMITMENT_COLUMNS)  # the layout provisioner reads (one definition)
HOURS = {"1y": 8760, "3y": 26280}

AWS_FILE = "catalog/aws_ec2instances_gpu_raw_2025-11-30.json"
GCP_FILE = "catalog/gcp_compute_pricing_cyclenerd_2026-07-30.csv"

#: (provider, option, payment, term) -> (fraction off on-demand, what the figure rests on)
PUBLISHED_RATES: dict[tuple[str, str, str, str], tuple[float, str]] = {
    # Azure: reservation ~41% (1y) / ~62% (3y) off pay-as-you-go (cloudecon.com 2023, D2s_v5
    # example; Azure says up to 72%); the monthly payment option costs the same (Azure).
    ("azure", "reservation", "all", "1y"): (0.41, "published rate 41% (Azure reservation 1y)"),
    ("azure", "reservation", "no", "1y"): (0.41, "published rate 41% (Azure reservation 1y)"),
    ("azure", "reservation", "all", "3y"): (0.62, "published rate 62% (Azure reservation 3y)"),
    ("azure", "reservation", "no", "3y"): (0.62, "published rate 62% (Azure reservation 3y)"),
    # Alibaba: savings plan 3y 54.5% off (Alibaba Cloud blog, ecs.g6 Shanghai example)
    ("alibaba", "savings-plan", "no", "3y"): (
        0.545,
        "published rate 54.5% (Alibaba savings plan 3y) on estimated price",
    ),
    # Tencent: monthly subscription bought for 1 year 17% off, 3 years 70% off (Tencent's
    # pricing-tier page example); base = pay-as-you-go x 730 h/month
    ("tencent", "monthly-prepaid", "all", "1y"): (
        0.17,
        "published rate 17% (Tencent prepaid 1y) on estimated price",
    ),
    ("tencent", "monthly-prepaid", "all", "3y"): (
        0.70,
        "published rate 70% (Tencent prepaid 3y) on estimated price",
    ),
}
RATE_DATE = "2026-12-03"


def _offers() -> dict[tuple[str, str, str], float]:
    """(provider, region, instance_type) -> lowest on-demand price among its zones."""
    out: dict[tuple[str, str, str], float] = {}
    with OFFERS.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if not row["price"]:
                continue
            key = (row["provider"], row["region"], row["instance_type"])
            price = float(row["price"])
            out[key] = min(out.get(key, price), price)
    return out


def _row(
    p: str,
    r: str,
    t: str,
    term: str,
    option: str,
    payment: str,
    hourly: float,
    upfront: float,
    source: str,
    date: str,
) -> dict[str, str]:
    return {
        "provider": p,
        "region": r,
        "instance_type": t,
        "term": term,
        "option": option,
        "payment": payment,
        "hourly": f"{hourly:.6g}",
        "upfront": f"{upfront:.2f}",
        "source": source,
        "date": date,
    }


def _aws(shared: Path, offers: dict[tuple[str, str, str], float]) -> list[dict[str, str]]:
    data = json.loads((shared / AWS_FILE).read_text(encoding="utf-8"))
    rows = []
    src = "ec2instances.info 2025-11-30"
    for inst in data:
        t = inst["instance_type"]
        for region, by_os in sorted(inst.get("pricing", {}).items()):
            if ("aws", region, t) not in offers:
                continue
            reserved = (by_os.get("linux") or {}).get("reserved") or {}
            for term, key in (("1y", "yrTerm1"), ("3y", "yrTerm3")):
                for payment, name in (
                    ("all", "allUpfront"),
                    ("partial", "partialUpfront"),
                    ("no", "noUpfront"),
                ):
                    v = reserved.get(f"{key}Standard.{name}")
                    if v:
                        h = float(v)
                        up = {"all": 1.0, "partial": 0.5, "no": 0.0}[payment] * h * HOURS[term]
                        why = src + (
                            " RI (partial: half upfront, assumed)"
                            if payment == "partial"
                            else " RI"
                        )
                        rows.append(
                            _row(
                                "aws",
                                region,
                                t,
                                term,
                                "reserved-instance",
                                payment,
                                h,
                                up,
                                why,
                                "2025-11-30",
                            )
                        )
                std = reserved.get(f"{key}Standard.noUpfront")
                if std:
                    rows.append(
                        _row(
                            "aws",
                            region,
                            t,
                            term,
                            "savings-plan-ec2",
                            "no",
                            float(std),
                            0.0,
                            src + " proxy: standard RI no-upfront",
                            "2025-11-30",
                        )
                    )
                conv = reserved.get(f"{key}Convertible.noUpfront")
                if conv:
                    rows.append(
                        _row(
                            "aws",
                            region,
                            t,
                            term,
                            "savings-plan-compute",
                            "no",
                            float(conv),
                            0.0,
                            src + " proxy: convertible RI no-upfront",
                            "2025-11-30",
                        )
                    )
    return rows


def _gcp(shared: Path, offers: dict[tuple[str, str, str], float]) -> list[dict[str, str]]:
    rows = []
    with (shared / GCP_FILE).open(newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            key = ("gcp", r["region"], r["machine_type"])
            if key not in offers:
                continue
            for term, col in (("1y", "month_1y"), ("3y", "month_3y")):
                if r[col]:
                    rows.append(
                        _row(
                            "gcp",
                            r["region"],
                            r["machine_type"],
                            term,
                            "cud",
                            "no",
                            float(r[col]) / 730.0,
                            0.0,
                            f"Cyclenerd 2026-07-30 {col}/730h",
                            "2026-07-30",
                        )
                    )
    return rows


def _published(offers: dict[tuple[str, str, str], float]) -> list[dict[str, str]]:
    rows = []
    for (p, r, t), price in sorted(offers.items()):
        for (rp, option, payment, term), (off, why) in PUBLISHED_RATES.items():
            if rp != p:
                continue
            h = price * (1.0 - off)
            up = h * HOURS[term] if payment == "all" else 0.0
            rows.append(_row(p, r, t, term, option, payment, h, up, why, RATE_DATE))
    return rows


def build(shared: Path) -> list[dict[str, str]]:
    offers = _offers()
    rows = _aws(shared, offers) + _gcp(shared, offers) + _published(offers)
    rows.sort(
        key=lambda x: (
            x["provider"],
            x["region"],
            x["instance_type"],
            x["term"],
            x["option"],
            x["payment"],
        )
    )
    return rows


def render(rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env = os.environ.get("PROVISIONER_SHARED_DATA")
    ap.add_argument(
        "--shared", type=Path, default=Path(env) if env else ROOT.parent / "shared" / "data"
    )
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = render(build(args.shared))
    if args.check:
        ok = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if ok else 'out of date'}", file=sys.stderr)
        return 0 if ok else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT}: {text.count(chr(10)) - 1} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
