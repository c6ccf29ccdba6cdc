import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import ROOT  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_cleanup as clean
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store as store
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_switch as switch
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (
    ReleaseError, read_current, read_manifest, release_path)

STAMP = "20261129T120000Z"
META = {"sglang_version": "0.5.23", "launch_module": "sglang.launch_server"}


def files(config="tp-size: 2\n"):
    return [
        {"name": "config.yaml", "content": config, "mode": "0644"},
        {"name": "sglang.env", "content": 'CUDA_VISIBLE_DEVICES="0,1"\n', "mode": "0600"},
    ]


def deploy(base, config="tp-size: 2\n", stamp=STAMP, meta=META):
    prepared = store.prepare(str(base), stamp, files(config), meta)
    switch.activate(str(base), prepared["release"])
    return prepared


def test_first_prepare_creates_a_pending_release(tmp_path):
    out = store.prepare(str(tmp_path), STAMP, files(), META)
    assert out["created"] and out["changed"]
    assert out["release"].startswith(STAMP + "-") and len(out["release"]) == len(STAMP) + 9
    path = tmp_path / "releases" / out["release"]
    assert (path / "config.yaml").read_text() == "tp-size: 2\n"
    assert oct((path / "sglang.env").stat().st_mode & 0o777) == "0o600"
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["status"] == "pending"
    assert manifest["sglang_version"] == "0.5.23"
    assert out["current"] is None
    assert not (tmp_path / "current").exists()  # preparing never touches what serves


def test_same_content_makes_no_release(tmp_path):
    first = deploy(tmp_path)
    again = store.prepare(str(tmp_path), "20261130T000000Z", files(), META)
    assert not again["changed"] and not again["created"]
    assert again["release"] == first["release"]
    assert os.listdir(tmp_path / "releases") == [first["release"]]


@pytest.mark.parametrize(
    "config, meta",
    [("tp-size: 4\n", META), ("tp-size: 2\n", {**META, "sglang_version": "0.5.20"})],
)
def test_changed_config_or_version_makes_a_new_release(tmp_path, config, meta):
    first = deploy(tmp_path)
    second = store.prepare(str(tmp_path), "20261130T000000Z", files(config), meta)
    assert second["created"] and second["release"] != first["release"]
    assert sorted(os.listdir(tmp_path / "releases")) == [first["release"], second["release"]]


def test_activate_swaps_current_and_records_previous(tmp_path):
    first = deploy(tmp_path)
    second = store.prepare(str(tmp_path), "20261130T000000Z", files("tp-size: 4\n"), META)
    out = switch.activate(str(tmp_path), second["release"])
    assert out["changed"] and out["current"] == first["release"]
    assert os.readlink(tmp_path / "current") == f"releases/{second['release']}"
    manifest = read_manifest(str(tmp_path), second["release"])
    assert manifest["status"] == "active" and manifest["previous"] == first["release"]
    assert not switch.activate(str(tmp_path), second["release"])["changed"]
    switch.mark(str(tmp_path), first["release"], "good")
    back = switch.activate(str(tmp_path), first["release"], check_mode=True)
    assert back["changed"] and os.readlink(tmp_path / "current").endswith(second["release"])
    config_diff = back["diff"][0]
    assert config_diff["after_header"] == f"{first['release']}/config.yaml"
    assert (config_diff["before"], config_diff["after"]) == ("tp-size: 4\n", "tp-size: 2\n")
    switch.activate(str(tmp_path), first["release"])  # a rollback keeps a proven release good
    assert read_manifest(str(tmp_path), first["release"])["status"] == "good"


def test_mark_failed_keeps_the_reason_and_is_never_a_rollback_target(tmp_path):
    first = deploy(tmp_path)
    switch.mark(str(tmp_path), first["release"], "good")
    second = store.prepare(str(tmp_path), "20261130T000000Z", files("tp-size: 4\n"), META)
    out = switch.mark(str(tmp_path), second["release"], "failed", "preflight: flags")
    assert out["changed"] and out["manifest"]["reason"] == "preflight: flags"
    assert read_manifest(str(tmp_path), second["release"])["status"] == "failed"
    assert os.readlink(tmp_path / "current").endswith(first["release"])
    assert store.info(str(tmp_path))["previous_good"] is None  # current is the only good one


def test_mark_good_once(tmp_path):
    first = deploy(tmp_path)
    assert switch.mark(str(tmp_path), first["release"], "good")["changed"]
    assert read_manifest(str(tmp_path), first["release"])["status"] == "good"
    assert not switch.mark(str(tmp_path), first["release"], "good")["changed"]


def test_check_mode_writes_nothing_and_shows_the_diff(tmp_path):
    deploy(tmp_path)
    before = sorted(os.listdir(tmp_path / "releases"))
    out = store.prepare(str(tmp_path), "20261130T000000Z", files("tp-size: 4\n"), META,
                        check_mode=True)
    assert out["changed"] and out["created"]
    assert sorted(os.listdir(tmp_path / "releases")) == before
    assert out["diff"] == [{
        "before_header": "current/config.yaml",
        "after_header": "new release/config.yaml",
        "before": "tp-size: 2\n",
        "after": "tp-size: 4\n",
    }]
    version = store.prepare(str(tmp_path), "20261130T000000Z", files(),
                            {**META, "sglang_version": "0.5.20"}, check_mode=True)
    assert [d["after_header"] for d in version["diff"]] == ["new release/manifest"]
    assert 'sglang_version: "0.5.23"' in version["diff"][0]["before"]
    assert 'sglang_version: "0.5.20"' in version["diff"][0]["after"]
    second = out["release"]
    with pytest.raises(ReleaseError, match="no readable manifest"):
        switch.activate(str(tmp_path), second, check_mode=True)


def test_ids_sort_by_creation(tmp_path):
    ids = [deploy(tmp_path, f"n: {i}\n", f"2026112{i}T000000Z")["release"] for i in range(3)]
    assert sorted(ids) == ids


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda b: store.prepare(b, "yesterday", files(), META), "stamp"),
        (lambda b: store.prepare(b, STAMP, [{"name": "../x", "content": ""}], META), "file name"),
        (lambda b: store.prepare(b, STAMP, [{"name": "manifest.json", "content": ""}], META),
         "file name"),
        (lambda b: switch.activate(b, "latest"), "not a release id"),
        (lambda b: switch.activate(b, "20261129T000000Z-deadbeef"), "no readable manifest"),
    ],
)
def test_bad_requests_are_refused(tmp_path, call, message):
    with pytest.raises(ReleaseError, match=message):
        call(str(tmp_path))


def test_current_that_is_not_a_symlink_is_refused(tmp_path):
    (tmp_path / "current").mkdir()
    with pytest.raises(ReleaseError, match="not a symlink"):
        store.prepare(str(tmp_path), STAMP, files(), META)


def test_info_lists_releases_oldest_first_and_the_rollback_target(tmp_path):
    assert store.info(str(tmp_path)) == {"changed": False, "current": None, "releases": [],
                                         "serving": {}, "previous_good": None, "drift": []}
    a = deploy(tmp_path, "n: a\n", "20261101T000000Z")["release"]
    switch.mark(str(tmp_path), a, "good")
    b = deploy(tmp_path, "n: b\n", "20261102T000000Z")["release"]
    switch.mark(str(tmp_path), b, "good")
    c = deploy(tmp_path, "n: c\n", "20261103T000000Z")["release"]  # active, never proven
    out = store.info(str(tmp_path))
    assert [m["id"] for m in out["releases"]] == [a, b, c]
    assert [m["status"] for m in out["releases"]] == ["good", "good", "active"]
    assert out["current"] == c
    assert out["serving"] == out["releases"][-1] and out["serving"]["status"] == "active"
    assert out["previous_good"] == b
    # The baseline of the release that replaces one: its manifest when it was proven, else {}.
    assert store.info(str(tmp_path), b)["proven"]["id"] == b
    assert store.info(str(tmp_path), c)["proven"] == {}
    assert store.info(str(tmp_path), "20200101T000000Z")["proven"] == {}
    assert "proven" not in out
    # A proof of c (current: a run cut between its switch and its restart left it there,
    # unproven) compares with the newest good release but c, never with c itself.
    assert store.info(str(tmp_path), proving=c)["proven"]["id"] == b
    # A good release proven again (a re-run that restarts it) compares with the one before.
    assert store.info(str(tmp_path), proving=b)["proven"]["id"] == a
    assert store.info(str(tmp_path), proving=a)["proven"]["id"] == b


STATUSES = ("pending", "active", "good", "failed", "rolled-back")


@given(st.lists(st.sampled_from(STATUSES), max_size=12), st.data())
def test_the_baseline_of_a_proof_is_the_newest_good_release_that_is_not_the_one_proven(
        statuses, data):
    """Over release histories (cut: pending or active, failed, good, rolled back), whichever
    release is proven: its baseline is good, is not it, and no good release but it is newer."""
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import baseline_for

    releases = [{"id": f"2026110{i // 10}T0000{i % 10}0Z-0000000{i % 10}", "status": status}
                for i, status in enumerate(statuses)]
    ids = [m["id"] for m in releases] + ["20300101T000000Z-ffffffff"]
    proving = data.draw(st.sampled_from(ids))
    base = baseline_for(releases, proving)
    others = [m for m in releases if m["status"] == "good" and m["id"] != proving]
    if not others:
        assert base == {}
    else:
        assert base["status"] == "good" and base["id"] != proving
        assert base is others[-1]


def test_cleanup_keeps_the_newest_and_never_current_or_the_rollback_target(tmp_path):
    ids = []
    for i in range(8):
        out = deploy(tmp_path, f"n: {i}\n", f"2026110{i + 1}T000000Z")
        ids.append(out["release"])
        switch.mark(str(tmp_path), out["release"], "good" if i % 2 == 0 else "failed", "x")
    # good: 0 2 4 6 ; other: 1 3 5 7 (current is 7, failed); previous good: 6
    out = clean.cleanup(str(tmp_path), keep_good=2, keep_other=1, check_mode=True)
    assert out["removed"] == [ids[0], ids[1], ids[2], ids[3], ids[5]]
    assert len(os.listdir(tmp_path / "releases")) == 8  # check mode deleted nothing
    clean.cleanup(str(tmp_path), keep_good=2, keep_other=1)
    assert sorted(os.listdir(tmp_path / "releases")) == [ids[4], ids[6], ids[7]]
    assert clean.cleanup(str(tmp_path), keep_good=0, keep_other=0)["removed"] == [ids[4]]
    assert sorted(os.listdir(tmp_path / "releases")) == [ids[6], ids[7]]


# --- issue 13: hostile manifests, escaping paths, wrong clocks, drift, faults --------------

def _manifest_path(base, release):
    return base / "releases" / release / "manifest.json"


def _rewrite_manifest(base, release, **changes):
    path = _manifest_path(base, release)
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_cleanup_deletes_by_directory_never_by_the_id_a_manifest_claims(tmp_path):
    """Before: a manifest id '../../victim' made cleanup delete outside the base dir."""
    base = tmp_path / "base"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("x")
    old = store.prepare(str(base), "20261101T000000Z", files("n: 1\n"), META)["release"]
    switch.mark(str(base), old, "failed", "x")
    _rewrite_manifest(base, old, id="../../victim")
    for n in range(2, 6):
        deploy(base, f"n: {n}\n", f"2026110{n}T000000Z")
    out = clean.cleanup(str(base), keep_good=5, keep_other=1)
    assert old in out["removed"]
    assert (victim / "precious").exists()
    assert not (base / "releases" / old).exists()


@pytest.mark.parametrize("target", ["/etc", "current", "../outside/20261101T000000Z-0123abcd",
                                    "releases/../../x", "releases/not-an-id"])
def test_current_pointing_outside_or_at_itself_is_refused(tmp_path, target):
    """Before: `current` -> /etc or -> itself was taken by its basename."""
    deploy(tmp_path)
    (tmp_path / "current").unlink()
    os.symlink(target, tmp_path / "current")
    for call in (lambda: store.info(str(tmp_path)),
                 lambda: store.prepare(str(tmp_path), STAMP, files("n: 9\n"), META)):
        with pytest.raises(ReleaseError, match="points at .*not at releases/<id>"):
            call()


def test_a_release_dir_that_is_a_symlink_out_is_refused(tmp_path):
    (tmp_path / "releases").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "releases" / "20261101T000000Z-0123abcd")
    with pytest.raises(ReleaseError, match="leads outside"):
        release_path(str(tmp_path), "20261101T000000Z-0123abcd")
    for bad in ("../x", "20261101T000000Z-0123abcd\n", "", None, ["a"]):
        with pytest.raises(ReleaseError, match="not a release id"):
            release_path(str(tmp_path), bad)


@pytest.mark.parametrize("content", ["[]", '"text"', "null", "{}", '{"status": 5}',
                                     '{"files": []}', "{not json", '{"id": "x", "seq": "2"}'])
def test_wrong_typed_manifests_never_raise(tmp_path, content):
    """Before: a manifest that is a list, a string or lacks `id` broke info, cleanup, activate."""
    first = deploy(tmp_path)["release"]
    second = store.prepare(str(tmp_path), "20261201T000000Z", files("n: 2\n"), META)["release"]
    _manifest_path(tmp_path, second).write_text(content)
    out = store.info(str(tmp_path))
    assert {m["id"] for m in out["releases"]} == {first, second}
    clean.cleanup(str(tmp_path), keep_good=0, keep_other=0)
    try:
        switch.activate(str(tmp_path), second)
    except ReleaseError as exc:
        assert "no readable manifest" in str(exc)
    store.prepare(str(tmp_path), "20261202T000000Z", files("n: 3\n"), META)


def test_unreadable_manifests_are_never_cleaned_up(tmp_path):
    """Before: a good release whose manifest was unreadable counted as 'other' and was deleted."""
    ids = [deploy(tmp_path, f"n: {n}\n", f"2026110{n}T000000Z")["release"] for n in range(1, 6)]
    _manifest_path(tmp_path, ids[0]).write_text("{broken")
    out = clean.cleanup(str(tmp_path), keep_good=1, keep_other=0)
    assert ids[0] not in out["removed"] and out["unreadable"] == [ids[0]]
    assert (tmp_path / "releases" / ids[0]).is_dir()


def test_a_clock_that_ran_ahead_cannot_poison_the_order(tmp_path):
    """Before: a release stamped in 2099 stayed 'previous good' forever and cleanup kept it
    while deleting the real newest ones."""
    ahead = deploy(tmp_path, "n: ahead\n", "20991231T000000Z")["release"]
    switch.mark(str(tmp_path), ahead, "good")
    later = []
    for n in range(1, 4):
        r = deploy(tmp_path, f"n: {n}\n", f"2026110{n}T000000Z")["release"]
        switch.mark(str(tmp_path), r, "good")
        later.append(r)
    out = store.info(str(tmp_path))
    assert [m["id"] for m in out["releases"]] == [ahead, *later]
    assert out["previous_good"] == later[1]
    assert clean.cleanup(str(tmp_path), keep_good=3, keep_other=0)["removed"] == [ahead]


def test_two_activations_leave_one_active(tmp_path):
    """Before: two activations without the deploy lock left two releases `active`."""
    a = store.prepare(str(tmp_path), "20261101T000000Z", files("n: a\n"), META)["release"]
    b = store.prepare(str(tmp_path), "20261102T000000Z", files("n: b\n"), META)["release"]
    switch.activate(str(tmp_path), a)
    switch.activate(str(tmp_path), b)
    statuses = {m["id"]: m["status"] for m in store.info(str(tmp_path))["releases"]}
    assert statuses == {a: "superseded", b: "active"}


def test_enospc_during_activate_leaves_no_temp_file(tmp_path, monkeypatch):
    """Before: a full disk while writing the manifest left .manifest.* behind."""
    import errno

    a = store.prepare(str(tmp_path), STAMP, files(), META)["release"]
    before = sorted(p.name for p in (tmp_path / "releases" / a).iterdir())

    def full(*_args, **_kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    # The temp file is written; putting it in place fails as a full disk would.
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        switch.activate(str(tmp_path), a)
    assert sorted(p.name for p in (tmp_path / "releases" / a).iterdir()) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".current.")]
    assert not (tmp_path / "current").exists()


def test_drift_of_the_serving_release_is_named_and_repaired(tmp_path):
    """Before: config.yaml removed or launch rewritten in place went unnoticed by a re-run."""
    served = deploy(tmp_path)["release"]
    path = tmp_path / "releases" / served
    (path / "config.yaml").unlink()
    (path / "sglang.env").write_text('CUDA_VISIBLE_DEVICES="7"\n')
    assert store.info(str(tmp_path))["drift"] == [
        {"file": "config.yaml", "change": "missing"},
        {"file": "sglang.env", "change": "content changed"}]
    checked = store.prepare(str(tmp_path), "20261201T000000Z", files(), META, check_mode=True)
    assert checked["changed"] and checked["repaired"] == ["config.yaml", "sglang.env"]
    assert not (path / "config.yaml").exists()  # check mode repairs nothing
    out = store.prepare(str(tmp_path), "20261201T000000Z", files(), META)
    assert out["release"] == served and not out["created"] and out["changed"]
    assert (path / "config.yaml").read_text() == "tp-size: 2\n"
    assert oct((path / "sglang.env").stat().st_mode & 0o777) == "0o600"
    assert store.info(str(tmp_path))["drift"] == []
    again = store.prepare(str(tmp_path), "20261201T000000Z", files(), META)
    assert not again["changed"]


def test_drift_that_cannot_be_re_rendered_is_refused_with_the_list(tmp_path):
    served = deploy(tmp_path)["release"]
    _rewrite_manifest(tmp_path, served, files={**json.loads(
        _manifest_path(tmp_path, served).read_text())["files"], "extra.sh": "0" * 64})
    with pytest.raises(ReleaseError, match=r"changed in place .*extra.sh \(missing\)"):
        store.prepare(str(tmp_path), "20261201T000000Z", files(), META)


# --- envs: a release names its env; activation switches the ml-env link; cleanup ---------------

def make_env(base, env, dist="sglang-0.5.23"):
    """A built env as sglang_env leaves it: a dist-info RECORD and the marker, written last."""
    from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
    path = base / "envs" / env
    record = path / "lib" / "python3.11" / "site-packages" / f"{dist}.dist-info" / "RECORD"
    record.parent.mkdir(parents=True)
    record.write_text(f"{dist}.dist-info/METADATA,,\n")
    digest = envs.digest(str(path))
    (path / ".sglang-env.json").write_text(json.dumps({"id": env, "digest": digest}))
    return path, digest


ENV_A, ENV_B, ENV_C = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc"


def with_env(base, env, config):
    prepared = store.prepare(str(base), STAMP, files(config), META)
    _, digest = make_env(base, env) if not (base / "envs" / env).exists() else (None, None)
    digest = digest or json.loads((base / "envs" / env / ".sglang-env.json").read_text())["digest"]
    store.packages(str(base), prepared["release"], ["sglang==0.5.23"],
                   env={"env": env, "env_digest": digest})
    return prepared["release"]


def envs_listing(base):
    return sorted(n for n in os.listdir(base / "envs") if not n.startswith("."))


def leads_to(link):
    """The env the ml-env link leads to (through current/env)."""
    return os.path.basename(os.path.realpath(link))


def test_activation_points_the_ml_env_link_at_the_release_env(tmp_path):
    link = tmp_path / "ml-env"
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    out = switch.activate(str(tmp_path), one, env_link=str(link))
    assert out["changed"] and out["env_linked"] is None
    # Once and for all through current: moving current (one rename) moves the ml-env with it.
    assert os.readlink(link) == str(tmp_path / "current" / "env") and leads_to(link) == ENV_A
    assert os.readlink(tmp_path / "releases" / one / "env") == f"../../envs/{ENV_A}"
    two = with_env(tmp_path, ENV_B, "a: 2\n")
    out = switch.activate(str(tmp_path), two, env_link=str(link))
    assert out["env_linked"] == ENV_A and leads_to(link) == ENV_B
    assert store.info(str(tmp_path))["releases"][0]["env_ready"]
    # Back: a switch, nothing else.
    out = switch.activate(str(tmp_path), one, env_link=str(link))
    assert out["changed"] and leads_to(link) == ENV_A
    assert not switch.activate(str(tmp_path), one, env_link=str(link))["changed"]


def test_a_link_of_the_layout_before_or_of_a_moved_base_is_pointed_through_current(tmp_path):
    link = tmp_path / "ml-env"
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    switch.activate(str(tmp_path), one, env_link=str(link))
    manifest = read_manifest(str(tmp_path), one)
    make_env(tmp_path, ENV_B)
    for old in (tmp_path / "envs" / ENV_B, tmp_path / "old-base" / "current" / "env"):
        link.unlink()
        link.symlink_to(old)
        out = switch.activate(str(tmp_path), one, env_link=str(link))
        assert out["changed"] and leads_to(link) == ENV_A
        assert os.readlink(link) == str(tmp_path / "current" / "env")
    assert read_manifest(str(tmp_path), one)["activated"] == manifest["activated"]


def test_a_real_directory_at_the_link_is_refused_before_anything_changes(tmp_path):
    link = tmp_path / "ml-env"
    (link / "bin").mkdir(parents=True)
    (link / "bin" / "python").write_text("hand-made")
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    with pytest.raises(Exception, match="real directory.*left as it is.*mv "):
        switch.activate(str(tmp_path), one, env_link=str(link))
    assert read_current(str(tmp_path)) is None
    assert (link / "bin" / "python").read_text() == "hand-made"


def test_a_changed_or_missing_env_is_refused_before_anything_changes(tmp_path):
    link = tmp_path / "ml-env"
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    switch.activate(str(tmp_path), one, env_link=str(link))
    two = with_env(tmp_path, ENV_B, "a: 2\n")
    # Something installed into env B by hand: its RECORDs change, so does its digest.
    extra = tmp_path / "envs" / ENV_B / "lib" / "python3.11" / "site-packages" / "x-1.dist-info"
    extra.mkdir()
    (extra / "RECORD").write_text("x\n")
    with pytest.raises(ReleaseError, match=f"env {ENV_B} .*changed since it was built"):
        switch.activate(str(tmp_path), two, env_link=str(link))
    (extra / "RECORD").unlink()
    extra.rmdir()
    import shutil
    shutil.rmtree(tmp_path / "envs" / ENV_B)
    with pytest.raises(ReleaseError, match="not built"):
        switch.activate(str(tmp_path), two, env_link=str(link))
    assert read_current(str(tmp_path)) == one and leads_to(link) == ENV_A
    assert not store.info(str(tmp_path))["releases"][1]["env_ready"]


def test_cleanup_removes_the_envs_no_kept_release_names(tmp_path):
    link = tmp_path / "ml-env"
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    switch.activate(str(tmp_path), one, env_link=str(link))
    switch.mark(str(tmp_path), one, "good")
    two = with_env(tmp_path, ENV_B, "a: 2\n")
    switch.activate(str(tmp_path), two, env_link=str(link))
    switch.mark(str(tmp_path), two, "good")
    make_env(tmp_path, ENV_C)  # named by no release (a build of a deploy that was refused...)
    planned = clean.cleanup(str(tmp_path), 5, 3, check_mode=True, env_link=str(link))
    assert planned["removed_envs"] == [ENV_C] and (tmp_path / "envs" / ENV_C).exists()
    done = clean.cleanup(str(tmp_path), 0, 0, env_link=str(link))
    # keep_good 0: still current (B) and the rollback target (A) stay, with their envs.
    assert done["removed"] == [] and done["removed_envs"] == [ENV_C]
    assert envs_listing(tmp_path) == [ENV_A, ENV_B]
    assert done["envs_disk_bytes"] > 0 and done["freed_bytes"] > 0


def test_the_env_recorded_with_the_package_set(tmp_path):
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    manifest = read_manifest(str(tmp_path), one)
    assert manifest["env"] == ENV_A and manifest["env_digest"].startswith("sha256:")
    read = store.packages(str(tmp_path), one)
    assert read["packages"] == ["sglang==0.5.23"] and read["verified"]
    with pytest.raises(ReleaseError, match="may not set"):
        switch.mark(str(tmp_path), one, "good", results={"env": "x"})


def serving_one_with_two_made(base):
    """(ml-env link, release one serving on env A, release two made on env B)."""
    link = base / "ml-env"
    one = with_env(base, ENV_A, "a: 1\n")
    switch.activate(str(base), one, env_link=str(link))
    return link, one, with_env(base, ENV_B, "a: 2\n")


@pytest.mark.parametrize("edit", ["config.yaml", "packages.txt"])
def test_a_target_changed_after_it_was_made_is_refused_by_name_and_nothing_switches(tmp_path,
                                                                                     edit):
    link, one, two = serving_one_with_two_made(tmp_path)
    target = tmp_path / "releases" / two / edit
    target.write_text(target.read_text() + "# a hot-fix\n")
    with pytest.raises(ReleaseError, match=rf"{two}/{edit} \(content changed\).*nothing was "
                                           "switched or restarted"):
        switch.activate(str(tmp_path), two, env_link=str(link))
    assert read_current(str(tmp_path)) == one and leads_to(link) == ENV_A


def test_a_cleanup_cut_short_leaves_whole_trees_and_the_next_run_empties_the_trash(tmp_path):
    link = tmp_path / "ml-env"
    one = with_env(tmp_path, ENV_A, "a: 1\n")
    switch.activate(str(tmp_path), one, env_link=str(link))
    # What a killed cleanup leaves: a tree renamed into the trash, half removed.
    half = tmp_path / ".trash" / "x.1" / "tree"
    half.mkdir(parents=True)
    (tmp_path / "releases" / f".{one}.tmp").mkdir()  # a release write cut before its rename
    (tmp_path / ".current.999").symlink_to("releases/nowhere")
    done = clean.cleanup(str(tmp_path), 5, 3, env_link=str(link))
    assert not (tmp_path / ".trash").exists() and not (tmp_path / ".current.999").exists()
    assert os.listdir(tmp_path / "releases") == [one] and done["removed"] == []


def test_an_ml_env_link_that_cannot_be_written_leaves_current_and_says_where(tmp_path,
                                                                            monkeypatch):
    import errno
    link, one, two = serving_one_with_two_made(tmp_path)

    def full(_link, _path):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(envs, "switch_link", full)
    elsewhere = tmp_path / "other-volume" / "ml-env"
    with pytest.raises(ReleaseError, match=rf"{elsewhere} cannot be made .*No space left.*"
                                           rf"nothing was switched, current still names {one}"):
        switch.activate(str(tmp_path), two, env_link=str(elsewhere))
    assert read_current(str(tmp_path)) == one and leads_to(link) == ENV_A


def test_a_rollbacks_switch_marks_the_release_it_leaves_and_a_refused_one_marks_nothing(tmp_path):
    link, one, two = serving_one_with_two_made(tmp_path)
    switch.activate(str(tmp_path), two, env_link=str(link))
    switch.mark(str(tmp_path), two, "good")
    switch.mark(str(tmp_path), one, "good")
    # Back to one: two is marked rolled-back by the switch itself, before current moves (a run
    # cut after it must not take two for the release to go back to).
    switch.activate(str(tmp_path), one, env_link=str(link), rolled_back_reason="by hand to one")
    left = read_manifest(str(tmp_path), two)
    assert read_current(str(tmp_path)) == one
    assert (left["status"], left["reason"]) == ("rolled-back", "by hand to one")
    assert store.info(str(tmp_path))["previous_good"] is None
    # A refused switch (its files changed) marks nothing: the release that serves stays good.
    switch.mark(str(tmp_path), two, "good")
    switch.activate(str(tmp_path), two, env_link=str(link))
    (tmp_path / "releases" / one / "config.yaml").write_text("edited: 1\n")
    with pytest.raises(ReleaseError, match="content changed"):
        switch.activate(str(tmp_path), one, env_link=str(link), rolled_back_reason="by hand")
    assert read_manifest(str(tmp_path), two)["status"] == "good"
    assert read_current(str(tmp_path)) == two


@pytest.mark.parametrize("proven_before", [True, False])
def test_the_undo_of_a_rollback_by_hand_never_calls_an_unproven_release_good(tmp_path,
                                                                             proven_before):
    """One serves (proven, or live and never proven: a deploy cut before its proof); a rollback
    by hand to two, which fails; the undo switches back to one: good again only if it was."""
    link, one, two = serving_one_with_two_made(tmp_path)
    switch.mark(str(tmp_path), two, "good")
    if proven_before:
        switch.mark(str(tmp_path), one, "good")
    switch.activate(str(tmp_path), two, env_link=str(link), rolled_back_reason="by hand to two")
    assert read_manifest(str(tmp_path), one)["status"] == "rolled-back"
    switch.mark(str(tmp_path), two, "failed", reason="proof: no proven capacity")
    switch.activate(str(tmp_path), one, env_link=str(link))
    out = switch.restore(str(tmp_path), one)
    status = read_manifest(str(tmp_path), one)["status"]
    assert (status, out["manifest"]["status"]) == (("good",) * 2 if proven_before else ("active",) * 2)
    assert out["changed"] is proven_before and read_current(str(tmp_path)) == one


@given(st.lists(st.sampled_from(["good", "failed", "rolled-back"]), max_size=8))
def test_a_release_is_good_again_only_when_its_last_verdict_was_good(history):
    """Over a release's histories of verdicts and rollbacks (one a second, as the module stamps
    them): good again only when the last verdict (good or failed, not rolled back) was good."""
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (
        last_verdict_good)

    manifest = {"status": "active"}
    for second, event in enumerate(history):
        stamp = f"2026-12-01T00:00:{second:02d}Z"
        manifest.update({"status": event, "proven" if event == "good" else event: stamp})
    verdicts = [e for e in history if e != "rolled-back"]
    assert last_verdict_good(manifest) == (verdicts[-1:] == ["good"])
