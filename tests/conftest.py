from __future__ import annotations

import gc
import itertools
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simleaks import ENV_SESSION, ENV_TEST, SimServer, sim_servers, stop

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
_TESTS = itertools.count(1)

# Bytecode is written and read, as on an installed machine and in CI (benchmarks/cold_start.py
# does the same for its children). With PYTHONDONTWRITEBYTECODE set, as some sandboxes do,
# every worker compiled the project and rewrote every test module from source at collection
# (9 s more CPU a worker), and every Python subprocess compiled what it imported of the
# project again. Dropped here, before the workers and any subprocess start, so they inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _moto_base_images_only() -> None:
    """moto's EC2 images: its 44 base AMIs, not the 1,300-odd "latest" ones of each region.

    moto builds an EC2 backend for each region a test touches, and again after every reset
    (the AWS harness resets for each test); each build decompressed and parsed the region's
    list of latest AMIs and made an object of each, about a sixth of a second, a sixth of the
    fast tier's CPU in all. ``MOTO_AMIS_PATH`` (moto's own setting) names the file of images to
    load instead, and leaves the latest ones out: here the base list, written once (the
    harness takes its image from the backend, so it takes one of these). Set before any test
    module imports moto, and inherited by the workers and every subprocess."""
    if "MOTO_AMIS_PATH" in os.environ:
        return
    import gzip
    import importlib.util
    import tempfile

    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        return  # no moto here: the AWS tests skip
    packed = Path(next(iter(spec.submodule_search_locations))) / "ec2/resources/amis.json.gz"
    if not packed.is_file():
        return  # another layout of moto's: its defaults
    data = gzip.decompress(packed.read_bytes())
    target = Path(tempfile.gettempdir()) / f"provisioner-tests-moto-amis-{len(data)}.json"
    if not target.is_file() or target.read_bytes() != data:
        part = target.with_name(f"{target.name}.{os.getpid()}")
        part.write_bytes(data)
        part.replace(target)  # whole or not at all: workers may start on it meanwhile
    os.environ["MOTO_AMIS_PATH"] = str(target)


_moto_base_images_only()


# -- the collector, paced by the tests ------------------------------------------------------------

#: tests between two young collections of what the tests since the last one left (then frozen)
GC_FREEZE_EVERY = 5
#: tests between two full collections (everything thawed, collected and frozen again)
GC_FULL_EVERY = 250
_FINISHED = itertools.count(1)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """No automatic collection while the test modules and the SDKs they import load (a
    second of CPU a worker in full collections of what stays alive): once at the end."""
    paced = gc.isenabled() and _runs_tests(session.config)
    if paced:
        gc.disable()
    try:
        return (yield)
    finally:
        if paced:
            gc.enable()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """A worker holds a million objects once the cloud SDKs, moto's backends and the test
    modules are loaded, nearly all of them for the whole session, and CPython's collector
    rescanned every one each time enough new objects had survived: some 20 full collections
    of half a second each per worker, a sixth of the fast tier's CPU. As the daemon does with
    its passes (provisioner.control.heap), what is alive after collection is frozen (no
    longer scanned), and so is what survives every :data:`GC_FREEZE_EVERY` tests after a
    young collection (a test whose daemon's pacer thawed the heap at its close is frozen
    again there); every :data:`GC_FULL_EVERY` tests all is thawed and collected, so that
    cyclic garbage made under a freeze waits no longer than that. Only between tests and in
    the processes that run them (not pytest-xdist's controller): a test (and the daemon's
    pacer, which thaws when it closes) sees the collector as usual."""
    if _runs_tests(session.config):
        gc.collect()
        gc.freeze()


def _runs_tests(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("dsession")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After each test run here (never in pytest-xdist's controller): the pacing above."""
    result = yield
    n = next(_FINISHED)
    if n % GC_FULL_EVERY == 0:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    elif n % GC_FREEZE_EVERY == 0:
        # what the last tests kept: a young collection, then frozen (garbage promoted to the
        # old generation since the last freeze waits for the full collection)
        gc.collect(1)
        gc.freeze()
    return result


# -- sim servers: none outlives its test, none outlives the session ------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """The session's tag (pytest-xdist's workers inherit the controller's; a session a test
    runs inside another gets its own, or it would take the outer session's servers for its
    leaks and stop them under the outer tests), and this process as the owner of every sim
    server started under it: the server exits when it is gone."""
    from providers.sim.client import ENV_OWNER

    if hasattr(config, "workerinput"):
        os.environ.setdefault(ENV_SESSION, uuid.uuid4().hex)
    else:
        os.environ[ENV_SESSION] = uuid.uuid4().hex
    os.environ[ENV_OWNER] = str(os.getpid())


@pytest.fixture(autouse=True)
def _sim_servers_stopped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every sim server a test started (itself, or a command it ran) is stopped, with its
    instances, when the test ends, passed or failed: found by this test's tag in its
    environment."""
    tag = f"{os.getpid()}-{next(_TESTS)}"
    monkeypatch.setenv(ENV_TEST, tag)
    yield
    for server in sim_servers():
        if server.env.get(ENV_TEST) == tag:
            stop(server)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run, loudly, when a sim server the tests started is still alive at the end (a
    test or a fixture that leaves one running; each costs a share of a core until killed)."""
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller looks once they have all ended
    token = os.environ.get(ENV_SESSION)
    base = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]

    def ours() -> list[SimServer]:
        return [
            s
            for s in sim_servers()
            if s.env.get(ENV_SESSION) == token
            or (s.state_dir is not None and s.state_dir.is_relative_to(base))
        ]

    from providers.sim.client import ENV_OWNER

    def follows_its_owner(s: SimServer) -> bool:
        """A server owned by another process (a worker) exits once that owner is gone; one
        with no owner (a scrubbed environment) or owned by this process never does."""
        owner = s.env.get(ENV_OWNER, "")
        return owner.isdigit() and int(owner) != os.getpid()

    end = time.monotonic() + 10  # a worker's servers exit once it is gone (their owner)
    left = ours()
    while any(follows_its_owner(s) for s in left) and time.monotonic() < end:
        time.sleep(0.2)
        left = ours()
    if not left:
        return
    lines = [f"pid {s.pid} serving {s.state_dir}" for s in left]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (
        f"{len(left)} sim server(s) started by the tests still running after the session "
        "(a test or fixture did not stop it): " + "; ".join(lines)
    )
    if reporter is not None:
        reporter.write_sep("!", "sim servers left running", red=True, bold=True)
        reporter.write_line(message, red=True)
    else:
        print(message)
    for s in left:
        stop(s)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _no_cached_cloud_prices() -> None:
    """The AWS adapter keeps the on-demand prices it fetched for the process's life, keyed by
    the Pricing endpoint: a worker's moto server is one endpoint for every test, so one test's
    prices were another's (a policy drawn to fit the catalog found nothing under its hourly
    budget; the price refresh saw live prices where it must see none). Each test starts without
    (read only where a test already imported the adapter: no SDK is imported here)."""
    offers = sys.modules.get("providers.aws.offers")
    if offers is not None:
        offers.forget_on_demand_prices()


@pytest.fixture(autouse=True)
def _our_loggers_as_they_were() -> Iterator[None]:
    """The ``provisioner`` logger's level, put back after each test: the seeded run quiets it
    (CRITICAL) in-process, and a later test on that worker then saw none of our INFO records
    through caplog (the daemon's "quotes no live prices" line)."""
    import logging

    ours = logging.getLogger("provisioner")
    level, propagate, disabled = ours.level, ours.propagate, ours.disabled
    yield
    ours.setLevel(level)
    ours.propagate, ours.disabled = propagate, disabled


@pytest.fixture(autouse=True)
def _isolated_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own XDG state/config directories: no test touches the user's store."""
    base = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "cache"))
    monkeypatch.delenv("PROVISIONER_STORE", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    os.environ.setdefault("PYTHONHASHSEED", "0")


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data; the test is skipped when the shared data is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs ../shared/data ({p.relative_to(SHARED_DATA.parent)}) beside the repo")
    return p


# -- tiers ---------------------------------------------------------------------------------------

#: modules whose every test is slow, besides the ``e2e`` ones (real subprocesses): what they run
SLOW_MODULES = {
    "test_dashboard_browser": "a real Chromium",
    "test_job_hf": "a real Hugging Face Trainer",
    "test_job_save_timing": "real torch saves against a notice's deadline",
    "test_job_torchrun": "real torchrun workers",
    "test_launch_rules": "hundreds of launches against every cloud's rules",
}

#: single tests measured at seconds each (`pytest --durations`, docs/testing.md): hypothesis
#: properties over many examples, real servers and processes, real-window replays
SLOW_TESTS = {
    "test_agent.py::test_notice_signal_checkpoint_synced_before_the_kill",
    "test_agent_probe.py::test_agent_probes_the_node_before_the_job_and_stores_the_report",
    "test_agent_probe.py::test_agent_reports_since_when_the_gpu_is_idle",
    "test_agent_rebalance.py::test_the_agent_reports_the_recommendation_and_the_job_goes_on",
    "test_agent_repeats.py::test_an_agent_whose_store_refuses_checkpoints_says_so_once_and_once_when_it_works",
    "test_aws.py::test_offers_are_zonal_canonical_and_whole_gpus",
    "test_aws.py::test_run_instances_carries_bootstrap_tags_disk_and_imdsv2",
    "test_aws.py::test_the_instance_profile_goes_out_by_name_or_arn",
    "test_capabilities.py::test_the_daemons_price_refresh_skips_a_provider_without_live_prices",
    "test_cli_junk.py::test_junk_as_a_real_process",
    "test_cli_plan.py::test_plan_spot_finetune_only_eea_and_under_the_cap",
    "test_cloud_facts.py::test_the_sim_charges_each_cloud_by_its_billing",
    "test_contract.py::test_offers_are_this_clouds_gpu_offers",
    "test_contract.py::test_the_bid_sent_never_exceeds_the_cap",
    "test_daemon_service.py::test_ready_watchdog_metrics_reload_and_clean_stop",
    "test_dashboard.py::test_daemon_serves_the_dashboard_and_up_prints_its_address",
    "test_dashboard_child.py::test_the_child_ends_when_its_parent_is_killed",  # a parent and its dashboard child as processes, kill -9, the child's end waited for
    "test_dashboard_child.py::test_the_daemon_serves_its_page_from_a_child_it_stops_on_sigterm",
    "test_dashboard.py::test_dashboard_command_serves_a_store_and_refuses_bad_setups",
    "test_dashboard.py::test_jobs_page_lists_every_state_with_placement_market_progress_spend_deadline",
    "test_dashboard.py::test_pages_on_postgresql",
    "test_dashboard.py::test_the_daemons_price_refresh_is_the_history_the_prices_page_charts",
    "test_decide.py::test_launch_invariants",
    "test_daemon_regressions.py::test_1_a_daemon_job_on_on_demand_returns_to_spot",
    "test_daemon_regressions.py::test_7_failpoints_are_injected_not_read_from_the_environment",
    "test_dependencies.py::test_every_third_party_import_is_a_declared_requirement",
    "test_equivalence.py::test_a_gangs_looks_are_made_before_break",
    "test_equivalence.py::test_daemon_does_what_the_simulator_measured",
    "test_equivalence.py::test_looks_are_made_before_break",
    "test_estimate.py::test_estimate_bench_prints_coverage_bias_and_error_per_job_and_prior",
    "test_estimate_priors.py::test_the_bench_compares_the_score_and_history_priors_held_out",
    "test_example_job.py::test_killed_at_random_points_ends_bit_identical",
    "test_example_job.py::test_preempted_in_one_zone_resumed_in_another_bit_identical",
    "test_jobroad_checks.py::test_a_cloud_with_no_usable_bucket_says_so_and_names_the_shared_filesystem",
    "test_jobroad_checks.py::test_a_real_cloud_refuses_the_pypi_package_with_the_fix",
    "test_jobroad_checks.py::test_secrets_that_cannot_be_read",
    "test_jobroad_checks.py::test_user_data_carries_no_code_and_no_secret_with_a_100_mb_workdir",
    "test_layout.py::test_no_cycle_in_the_import_graph",
    "test_lazy_imports.py::test_plan_imports_only_what_it_uses",
    "test_learned.py::test_daemon_and_simulator_agree_with_the_learned_strategy",
    "test_learned.py::test_deadline_guarantee_on_adversarial_traces",
    "test_learned.py::test_no_look_ahead_decisions_to_t_ignore_the_trace_after_t",
    "test_looks.py::test_the_engine_and_the_replay_weigh_a_look_alike",
    "test_new_user.py::test_10_simulate_refuses_traces_outside_the_policy_or_lets_them_stand_in",
    "test_new_user.py::test_11_a_gang_shows_its_nodes_and_the_gang_s_price",
    "test_new_user.py::test_12_the_daemon_s_journal_holds_our_lines_not_the_libraries",
    "test_new_user.py::test_1_api_and_cli_plan_the_same_candidates_and_placement",
    "test_new_user.py::test_1_the_api_refuses_what_up_refuses_before_writing_anything",
    "test_new_user.py::test_5_cost_since_the_future_lists_nothing_at_minus_100_percent",
    "test_new_user.py::test_5_read_only_commands_never_create_a_store",
    "test_new_user.py::test_7_policy_check_says_when_a_policy_matches_no_offer",
    "test_new_user.py::test_8_at_80_columns_ids_and_money_are_never_cut",
    "test_new_user.py::test_9_the_demo_s_cost_says_time_was_compressed_and_the_billing_minimum",
    "test_notify.py::test_messages_reach_a_webhook_and_a_mailbox_in_order",
    "test_notify_delivery.py::test_a_webhook_is_not_held_behind_an_email_that_apprise_throttles",
    "test_notify_events.py::test_no_capacity_anywhere_is_told_once",
    "test_notify_events.py::test_spend_crossing_budget_levels_is_told_once_each",
    "test_objstore.py::test_agent_checkpoints_into_a_bucket_on_a_notice",
    "test_objstore.py::test_listing_past_one_page_from_many_threads",
    "test_plan_daemon_agree.py::test_plan_s_eligible_set_is_the_daemon_s_launchable_set",
    "test_plan_prices.py::test_plan_ranks_by_the_stored_live_quotes_and_shows_their_age",
    "test_planner.py::test_no_placement_breaks_residency_bid_cap_or_budget",
    "test_policy_fuzz.py::test_cli_never_prints_a_traceback",
    "test_policy_fuzz.py::test_hostile_documents_get_a_located_answer",
    "test_policy_fuzz.py::test_hostile_documents_through_the_pure_python_parser",
    "test_policy_fuzz.py::test_mutated_example",
    "test_policy_fuzz.py::test_random_structures",
    "test_policy_fuzz.py::test_random_text",  # 300 hypothesis examples, as the other fuzz properties
    "test_probe.py::test_cli_probe_text_and_output_file",
    "test_quotas.py::test_alibaba_vcpu_quotas_reject_spot_beyond_what_is_left",
    "test_quotas.py::test_aws_quotas_through_service_quotas_then_plan_rejects_beyond_them",
    "test_quotas.py::test_azure_usages_reject_spot_beyond_low_priority_cores",
    "test_quotas.py::test_gcp_regional_gpu_quotas_reject_spot_beyond_the_preemptible_quota",
    "test_quotas.py::test_tencent_zone_quotas_reject_a_zone_without_spot_left",
    "test_rules.py::test_the_guard_refuses_exactly_what_the_rules_refuse",
    "test_rules.py::test_the_planner_s_masks_are_the_scalar_rules",
    "test_secrets.py::test_aws_reads_secrets_manager_and_ssm",
    "test_sim_leaks.py::test_a_server_left_running_fails_the_session_loudly",
    "test_sim_provider.py::test_a_reused_server_starts_the_agent_of_the_checkout_that_launched",  # a second checkout copied, a real server and agent started from it
    "test_sim_provider.py::test_a_server_ends_its_instances_and_exits_when_its_owner_is_gone",  # a real server, an agent and an owner process, their ends waited for
    "test_sim_provider.py::test_concurrent_controllers_start_one_server",
    "test_sim_provider.py::test_demo_scenario_preempts_the_first_spot_instance_of_a_job",
    "test_sim_provider.py::test_idle_server_exits_by_itself",
    "test_sim_provider.py::test_market_preemption_from_a_trace",
    "test_sim_provider.py::test_server_outlives_the_controller_that_started_it",
    "test_simulate.py::test_cli_simulate_json_and_plot",
    "test_simulate.py::test_replay_and_decide_agree_on_real_windows",
    "test_simulate.py::test_replay_and_decide_agree_on_synthetic_windows",
    "test_simulate.py::test_the_four_properties_on_real_windows",
    "test_simulate_gang.py::test_gangs_on_the_16_node_set",
    "test_simulate_gang.py::test_simulate_nodes_4_prints_the_replay_s_restarts",  # 12 windows of the real 4-node traces through the simulator and the replay
    "test_simulate_rebalance.py::test_replay_and_decide_agree_with_early_signals",
    "test_spend_row.py::test_the_spend_column_follows_the_beat",
    "test_store.py::test_processes_opening_a_new_store_together_all_get_it",
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``slow``: end-to-end runs (``e2e``), chaos, browser and framework tests, and the tests
    measured at seconds each (``pytest -m "not slow"`` is the fast tier). The slow ones go first: under pytest-xdist the long tests then
    start at once on their own workers, and the short ones fill the gaps, so that the workers
    end together."""
    for item in items:
        module = item.path.stem
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if item.get_closest_marker("e2e") or module in SLOW_MODULES or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable
