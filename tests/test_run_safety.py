"""Files and run directories (issue 33): no unpickling, no write through a planted name, special files written through,
a model directory replaced as a whole, and a run directory that is the user's to name but zhner's to fill."""
import errno
import json
import os
import shutil
import stat
import tempfile
import threading
import time

import pytest
import torch

import zhner.fileio as fileio
import zhner.fileio.saves as saves
from cli_runner import run_zhner
from conftest import REPO, TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.fileio import SAVE_JOURNAL, atomic_open, atomic_write_text
from zhner.tagger import Tagger, default_model_dir
from zhner.train.rundir import LOCK, locked
from zhner.train.runs import train_seeds
from zhner.train.trainer import train

TEXTS = ["张三在北京大学工作。", "李四去了上海。", "王五是华为的工程师。"]


def zhner(*args, cwd=REPO, stdin=None):
    return run_zhner(*args, stdin=stdin, cwd=cwd)


def one_line_error(res, *fragments):
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, res.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def tiny(extra=()):
    return load_config(resolve_config("tener_resume"), TINY_TENER + list(extra))


def tiny_args(extra=()):
    return [arg for o in TINY_TENER + list(extra) for arg in ("--set", o)]


class Payload:
    """What an attacker plants: unpickling it creates `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


# -- 1. no unpickling ------------------------------------------------------------------------------------------------
def test_a_pickled_checkpoint_is_refused_without_running_it(tmp_path):
    probe = tmp_path / "probe.pt"
    torch.save({"state": Payload(tmp_path / "ran-in-probe")}, probe)
    torch.load(probe, weights_only=False)  # the payload is live: an unpickling loader runs it
    assert (tmp_path / "ran-in-probe").exists()

    run = tmp_path / "run"
    run.mkdir()
    marker = tmp_path / "ran"
    torch.save({"config": "", "model": {}, "state": Payload(marker)}, run / "checkpoint.pt")
    res = zhner("train", "tener_resume", "-o", run, *tiny_args())
    one_line_error(res, str(run / "checkpoint.pt"), "holds Python objects")
    assert not marker.exists()


@pytest.mark.parametrize("form", ["zip-bomb", "legacy-format"])
def test_a_checkpoint_that_would_unpack_to_more_than_it_holds_is_refused_before_torch_load(tmp_path, monkeypatch, form):
    """A 1 MB checkpoint.pt cost 1.44 GB before it was refused (issue 46): a compressed record (torch.save stores
    them) unpacks to what its header says, and torch's legacy format allocates the storage sizes it declares. Both are
    one line now, before torch.load."""
    import zipfile

    from zhner.train import rundir

    path = tmp_path / "checkpoint.pt"
    if form == "zip-bomb":  # 256 MiB of zeros in 256 kB
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("archive/data.pkl", bytes(2**28))
        assert path.stat().st_size < 2**20
    else:
        torch.save({"x": torch.zeros(2)}, path, _use_new_zipfile_serialization=False)
    monkeypatch.setattr(torch, "load", lambda *a, **kw: pytest.fail("torch.load ran"))
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    with pytest.raises(ZhnerError, match="compressed records" if form == "zip-bomb" else "not a zip archive") as err:
        rundir.restore_checkpoint(path, model, opt, sched, tiny(), None)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def test_no_loader_in_the_package_unpickles():
    """Every torch.load is weights_only=True, every np.load allow_pickle=False, and nothing imports pickle to load."""
    sources = {p: p.read_text(encoding="utf-8") for p in (REPO / "zhner").rglob("*.py")}
    for path, text in sources.items():
        for call in ("torch.load(", "np.load("):
            for chunk in text.split(call)[1:]:
                args = chunk[: chunk.index(")")]
                assert ("weights_only=True" if call == "torch.load(" else "allow_pickle=False") in args, (path, args)
        assert "pickle.load" not in text and "pickle.loads" not in text, path


# -- 2. temporary files created exclusively ----------------------------------------------------------------------------
def test_planted_symlinks_at_the_old_temporary_names_are_not_followed(tmp_path):
    run = tmp_path / "run"
    metrics = train(tiny(["train.epochs=3", "train.max_minutes=0.0001"]), run, log=lambda _: None)
    assert metrics["status"] == "time_budget" and (run / "checkpoint.pt").exists()  # a run to resume
    (run / "log.jsonl").rename(tmp_path / "victim-log.jsonl")  # appended to through a link before
    (run / "log.jsonl").symlink_to(tmp_path / "victim-log.jsonl")
    victims = [tmp_path / "victim-log.jsonl"]
    before = victims[0].read_text()
    for name in ("checkpoint.pt.partial", ".model.safetensors.partial"):  # the fixed names written through before
        victim = tmp_path / f"victim-{name}"
        victim.write_text("mine")
        (run / name).symlink_to(victim)
        victims.append(victim)
    (run / ".model.safetensors.k3j_x9q2.tmp").write_bytes(b"left by a kill")  # removed by the run that resumes
    metrics = train(tiny(["train.epochs=3"]), run, log=lambda _: None)  # writes checkpoints and the model again
    assert metrics["status"] == "completed"
    assert victims[0].read_text() == before
    for victim in victims[1:]:
        assert victim.read_text() == "mine"
    assert sorted(p.name for p in run.iterdir() if p.is_symlink()) == [".model.safetensors.partial", "checkpoint.pt.partial"]
    assert [json.loads(x)["epoch"] for x in (run / "log.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    assert not (run / LOCK).exists()  # released and removed when the run ends


def test_a_checkpoint_is_written_as_a_new_file(tmp_path, monkeypatch):
    """The temporary file is made by mkstemp (O_EXCL | O_NOFOLLOW): a name that is there already is never reused."""
    made = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda **kw: made.append(kw) or real(**kw))
    from zhner.train.rundir import save_checkpoint

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    state = {"epoch": 0, "batch": 1, "step": 1, "elapsed": 0.0}
    save_checkpoint(tmp_path / "checkpoint.pt", model, opt, sched, state, tiny(), None)
    assert [kw["dir"] for kw in made] == [tmp_path]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["state"] == state


class FullDisk:
    """A file handle whose writes fail with ENOSPC once `room` bytes are written, as a full disk's do."""

    def __init__(self, handle, room):
        self.handle, self.room = handle, room

    def write(self, data):
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)


@pytest.mark.parametrize("how", ["ENOSPC", "RLIMIT_FSIZE"])
def test_a_full_disk_while_writing_a_checkpoint_is_one_line_and_keeps_the_last_one(tmp_path, monkeypatch, how):
    """torch.save reports a failed write as a RuntimeError of its zip writer (issue 46, item 4): the OSError under it
    is the one-line error naming checkpoint.pt, and the last checkpoint survives with no temporary file beside it.
    RLIMIT_FSIZE makes the kernel itself refuse the write (EFBIG) past a size."""
    import resource
    import signal

    from zhner.train.rundir import save_checkpoint

    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model, opt, sched, {"epoch": 1, "batch": 0, "step": 8, "elapsed": 1.0}, tiny(), None)
    before = path.read_bytes()
    with torch.no_grad():
        model.weight.add_(1.0)
    state = {"epoch": 2, "batch": 0, "step": 16, "elapsed": 2.0}
    if how == "ENOSPC":
        real = os.fdopen
        monkeypatch.setattr(os, "fdopen", lambda *a, **kw: FullDisk(real(*a, **kw), 100_000))
        with pytest.raises(ZhnerError) as err:
            save_checkpoint(path, model, opt, sched, state, tiny(), None)
        monkeypatch.undo()
    else:
        old_limit, old_handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) // 2, old_limit[1]))
        try:
            with pytest.raises(ZhnerError) as err:
                save_checkpoint(path, model, opt, sched, state, tiny(), None)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
            signal.signal(signal.SIGXFSZ, old_handler)
    message = str(err.value)
    assert message.startswith(f"{path}: cannot write: ") and "\n" not in message, message
    assert ("No space left" if how == "ENOSPC" else "File too large") in message
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


# -- 3. special files are written through ----------------------------------------------------------------------------
def read_fifo(path, into):
    def run():
        with open(path, encoding="utf-8") as f:
            into.append(f.read())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def fifo_target(tmp_path, through_link: bool, link_name: str):
    """A FIFO `pipe` in tmp_path, and the path to write: the FIFO itself, or a symlink `link_name` to it."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    if not through_link:
        return fifo, fifo
    (tmp_path / link_name).symlink_to(fifo)
    return fifo, tmp_path / link_name


@pytest.mark.parametrize("through_link", [False, True], ids=["fifo", "symlink-to-fifo"])
def test_atomic_writers_write_through_a_fifo(tmp_path, through_link):
    fifo, target = fifo_target(tmp_path, through_link, "link")
    got = []
    reader = read_fifo(fifo, got)
    atomic_write_text(target, "written through\n")
    reader.join(10)
    assert got == ["written through\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert target.is_symlink() == through_link
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"pipe", target.name})


def test_writers_by_name_get_a_new_file_or_the_fifo_itself(tmp_path):
    """staged_path (the ONNX export's writer): a new temporary name, renamed at the end; a FIFO is written through."""
    with pytest.raises(RuntimeError), fileio.staged_path(tmp_path / "model.onnx") as partial:
        assert partial != tmp_path / "model.onnx" and partial.exists()
        partial.write_bytes(b"half")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []
    with fileio.staged_path(tmp_path / "model.onnx") as partial:
        partial.write_bytes(b"onnx")
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"] and (tmp_path / "model.onnx").read_bytes() == b"onnx"
    os.mkfifo(tmp_path / "pipe")
    got = []
    reader = read_fifo(tmp_path / "pipe", got)
    with fileio.staged_path(tmp_path / "pipe") as partial:
        partial.write_bytes(b"onnx")
    reader.join(10)
    assert got == ["onnx"] and stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)


def test_a_file_of_zhners_own_directory_replaces_a_planted_fifo(tmp_path):
    """staged_path(through_special=False): export's default MODEL_DIR/model.onnx, pack's and the e5 build's files are
    zhner's own, so a FIFO (or a link to a device) planted there is replaced, never written through or waited on."""
    os.mkfifo(tmp_path / "model.onnx")
    (tmp_path / "weights").symlink_to("/dev/null")
    for name in ("model.onnx", "weights"):
        with fileio.staged_path(tmp_path / name, through_special=False) as partial:
            assert partial != tmp_path / name
            partial.write_bytes(b"onnx")
        assert (tmp_path / name).read_bytes() == b"onnx" and not (tmp_path / name).is_symlink()


def test_new_directories_refuse_what_is_there_and_leave_nothing_behind(tmp_path):
    """pretrained pack's output (fileio.new_directory): a name that exists, a dangling link included, is refused; a
    failed fill removes its claim and its temporary directory."""
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ZhnerError, match="already exists"), fileio.new_directory(tmp_path / "link"):
        pass
    with pytest.raises(RuntimeError), fileio.new_directory(tmp_path / "out") as tmp:
        (tmp / "a").write_text("half")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]
    with fileio.new_directory(tmp_path / "out") as tmp:
        (tmp / "a").write_text("whole")
    assert (tmp_path / "out" / "a").read_text() == "whole" and sorted(p.name for p in tmp_path.iterdir()) == ["link", "out"]


def test_a_symlink_to_a_regular_file_keeps_the_link(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    with atomic_open(tmp_path / "link.txt") as f:
        f.write("new")
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "new"


@pytest.mark.parametrize("through_link", [False, True], ids=["fifo", "symlink-to-fifo"])
def test_predict_writes_through_a_fifo(tmp_path, through_link):
    fifo, target = fifo_target(tmp_path, through_link, "out.jsonl")
    got = []
    reader = read_fifo(fifo, got)
    res = zhner("predict", "-o", target, "-", stdin="张三在北京。\n")
    reader.join(60)
    assert res.returncode == 0, res.stderr
    assert json.loads(got[0])["text"] == "张三在北京。"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and target.is_symlink() == through_link


# -- 4. a model directory is replaced as a whole ---------------------------------------------------------------------------
@pytest.fixture
def two_models(tmp_path):
    """A copy of the shipped model (with lexicon.txt) and a different model to save over it."""
    directory = tmp_path / "model"
    shutil.copytree(default_model_dir(), directory)
    old = Tagger.load(directory)
    new = Tagger.load(directory)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in new.model.parameters():
            p.normal_()
    new.metrics = {"status": "completed", "note": "the new model"}
    return directory, old.predict(TEXTS), new


def snapshot(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_a_failed_save_at_any_file_leaves_the_old_model(two_models, monkeypatch):
    directory, old_predictions, new = two_models
    before = snapshot(directory)
    assert new.predict(TEXTS) != old_predictions  # the new model is told apart by what it predicts
    real = saves.staged_file
    calls = []

    def failing_at(k):
        def staged(path, *args, **kwargs):
            calls.append(path.name)
            if len(calls) == k:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(path, *args, **kwargs)

        return staged

    files = ["config.yaml", "vocab.json", "lexicon.txt", "model.safetensors", "metrics.json", SAVE_JOURNAL]
    for k in range(1, len(files) + 1):
        calls.clear()
        monkeypatch.setattr(saves, "staged_file", failing_at(k))
        with pytest.raises((OSError, ZhnerError)):
            new.save(directory)
        monkeypatch.setattr(saves, "staged_file", real)
        assert calls[-1] == files[k - 1]
        assert snapshot(directory) == before, f"failure at {files[k - 1]}"  # no file changed, no temporary file left
        assert Tagger.load(directory).predict(TEXTS) == old_predictions
    new.save(directory)
    assert Tagger.load(directory).predict(TEXTS) == new.predict(TEXTS)
    assert sorted(snapshot(directory)) == sorted(before)


def test_a_save_killed_after_its_commit_point_loads_as_the_new_model(two_models, monkeypatch):
    """A reader never writes (issue 46): it reads the committed set through the journal and leaves the renames to the
    next save."""
    directory, old_predictions, new = two_models
    before = sorted(snapshot(directory))
    monkeypatch.setattr(saves, "finish_pending_save", lambda directory: None)  # the renames never happen: a kill
    new.save(directory)
    monkeypatch.undo()
    killed = snapshot(directory)
    assert (directory / SAVE_JOURNAL).exists() and len(list(directory.glob(".*.tmp"))) == 5
    loaded = Tagger.load(directory)
    assert loaded.predict(TEXTS) == new.predict(TEXTS) and loaded.metrics["note"] == "the new model"
    assert snapshot(directory) == killed  # nothing renamed, nothing written
    loaded.save(directory)  # the next save finishes the killed one first
    assert sorted(snapshot(directory)) == before and Tagger.load(directory).predict(TEXTS) == new.predict(TEXTS)


def test_a_load_during_a_saves_renames_reads_the_new_set_and_leaves_the_renames_to_it(two_models, monkeypatch):
    """A save paused between its commit point and its renames (as a busy trainer can be) while a load runs: the load
    gives the committed model and writes nothing; the save then finishes its own renames (issue 46, item 3: a load
    finished them itself, and the trainer's own renames then failed)."""
    directory, old_predictions, new = two_models
    real, saver = saves.finish_pending_save, []
    committed, go = threading.Event(), threading.Event()

    def paused(path):
        if threading.get_ident() in saver and (path / SAVE_JOURNAL).exists():
            committed.set()
            assert go.wait(60)
        real(path)

    monkeypatch.setattr(saves, "finish_pending_save", paused)
    errors = []

    def save():
        saver.append(threading.get_ident())
        try:
            new.save(directory)
        except Exception as exc:  # noqa: BLE001 - the saver's failure is the test's
            errors.append(exc)

    thread = threading.Thread(target=save)
    thread.start()
    assert committed.wait(60)
    pending = snapshot(directory)
    assert SAVE_JOURNAL in pending
    try:
        loaded = Tagger.load(directory)
        assert loaded.predict(TEXTS) == new.predict(TEXTS) and loaded.metrics["note"] == "the new model"
        assert snapshot(directory) == pending  # the reader renamed nothing
    finally:
        go.set()
        thread.join(60)
    assert not errors and SAVE_JOURNAL not in snapshot(directory)
    assert Tagger.load(directory).predict(TEXTS) == new.predict(TEXTS)


def test_loads_beside_repeated_saves_never_fail_nor_mix_two_saves(tmp_path):
    """100 loads while another thread saves two models in turn into the directory (issue 46, item 3): every load is
    one of the two, whole (its metrics.json's note is that of its weights), and neither side fails or waits. Before, a
    load finished a pending save itself, without a lock, and broke the saver's renames or had its own broken."""
    directory = tmp_path / "run"
    train(tiny(), directory, log=lambda _: None)
    models = {"A": Tagger.load(directory), "B": Tagger.load(directory)}
    with torch.no_grad():
        for p in models["B"].model.parameters():
            p.add_(1.0)
    weights = {}
    for note, model in models.items():
        model.metrics = {"note": note}
        weights[note] = sum(float(p.sum()) for p in model.model.parameters())
    models["A"].save(directory)
    stop, saves, saver_errors = threading.Event(), [0], []

    def saver():  # a save every 0.3 s or so (a training saves once an epoch): many land in a load, and it reads again
        while not stop.wait(0.25):
            try:
                models["B" if saves[0] % 2 == 0 else "A"].save(directory)
            except Exception as exc:  # noqa: BLE001 - any failure of the saver counts
                saver_errors.append(exc)
            saves[0] += 1

    thread = threading.Thread(target=saver, daemon=True)
    thread.start()
    load_errors, seen, loads = [], set(), 0
    deadline = time.monotonic() + 120  # at least 100 loads and 10 saves among them, however fast a load is
    try:
        while (loads < 100 or saves[0] < 10) and time.monotonic() < deadline:
            loads += 1
            try:
                loaded = Tagger.load(directory)
                note = loaded.metrics["note"]
                assert sum(float(p.sum()) for p in loaded.model.parameters()) == weights[note], "a mix of two saves"
                seen.add(note)
            except Exception as exc:  # noqa: BLE001 - any failure of a load counts
                load_errors.append(exc)
    finally:
        stop.set()
        thread.join(60)
    assert not load_errors and not saver_errors, (load_errors[:3], saver_errors[:3])
    assert saves[0] >= 10 and seen == {"A", "B"}, (saves[0], seen)
    assert not (directory / SAVE_JOURNAL).exists() and not list(directory.glob(".*.tmp"))


def test_a_planted_journal_renames_nothing_outside_its_set(tmp_path):
    (tmp_path / SAVE_JOURNAL).write_text(json.dumps({"rename": {"../escape": "../.escape.x.tmp"}}))
    with pytest.raises(ZhnerError, match="not a journal of zhner's"):
        fileio.finish_pending_save(tmp_path)


# -- 5. the run directory ---------------------------------------------------------------------------------------------
def test_train_to_an_empty_path_is_an_error(tmp_path):
    one_line_error(zhner("train", "tener_resume", "-o", "", cwd=tmp_path), "-o", "empty path")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ZhnerError, match="empty path"):
        train(tiny(), "", log=lambda _: None)


def test_train_never_fills_a_directory_of_the_users_own(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    config = project / "config.yaml"
    shutil.copy(resolve_config("tener_resume"), config)
    before = config.read_bytes()
    one_line_error(zhner("train", config, "-o", project, *tiny_args()), str(project), "not a run of zhner's")
    one_line_error(zhner("train", config, "-o", project, "--overwrite", *tiny_args()), str(project))
    assert config.read_bytes() == before and [p.name for p in project.iterdir()] == ["config.yaml"]
    with pytest.raises(ZhnerError, match="not a seed set of zhner's"):
        train_seeds(tiny(), project, 2, log=lambda _: None)
    assert [p.name for p in project.iterdir()] == ["config.yaml"]


def test_a_bad_corpus_leaves_no_directory(tmp_path):
    with pytest.raises(ZhnerError):
        train(tiny(["data.dataset=" + str(tmp_path / "nowhere")]), tmp_path / "new" / "run", log=lambda _: None)
    assert list(tmp_path.iterdir()) == []


def test_a_second_training_into_a_held_run_fails_at_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with locked(run / LOCK, run):
        res = zhner("train", "tener_resume", "-o", run, *tiny_args())
    one_line_error(res, str(run), "another training", f"pid {os.getpid()}")
    assert "data " not in res.stderr  # refused before the data was loaded
    assert [p.name for p in run.iterdir()] == [LOCK]


@pytest.mark.parametrize("cut", ["mid-line", "before-newline", "deep-last-line"])
def test_a_log_line_cut_short_by_a_kill_is_dropped_on_resume(tmp_path, cut):
    run = tmp_path / "run"
    train(tiny(["train.epochs=3", "train.max_minutes=0.0001"]), run, log=lambda _: None)
    text = (run / "log.jsonl").read_text()
    # the kill landed mid-write: in epoch 2's line, or just before epoch 1's newline; or a last line nested 100,000
    # deep, which was a RecursionError at every resume (issue 46), is dropped as a damaged last line
    damaged = {"mid-line": text + '{"epoch": 2, "step": 12, "lr": 0.0', "before-newline": text[:-1],
               "deep-last-line": text + '{"epoch": ' + "[" * 100_000 + "]" * 100_000 + "}\n"}
    (run / "log.jsonl").write_text(damaged[cut])
    lines = []
    metrics = train(tiny(["train.epochs=3"]), run, log=lines.append)
    assert metrics["status"] == "completed"
    warned = any(line.startswith("warning: ") and "log.jsonl:2: a log line cut short" in line for line in lines)
    assert warned == (cut != "before-newline")
    assert [json.loads(x)["epoch"] for x in (run / "log.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_failed_overwrite_keeps_the_old_log_with_the_old_model(tmp_path, monkeypatch):
    """--overwrite replaces the log with its first epoch's line, when it saves its first model: a run that fails before
    leaves the old model and the old log as they were (issue 46: the log was deleted at the start)."""
    import zhner.train.trainer as trainer

    run = tmp_path / "run"
    train(tiny(), run, log=lambda _: None)
    before = snapshot(run)

    def broken_step(*args, **kwargs):
        raise RuntimeError("the first step fails")

    monkeypatch.setattr(trainer, "train_step", broken_step)
    with pytest.raises(RuntimeError, match="the first step fails"):
        train(tiny(), run, log=lambda _: None, overwrite=True)
    monkeypatch.undo()
    assert {name: data for name, data in snapshot(run).items() if name != LOCK} == before  # a failed run keeps its lock
    train(tiny(["train.epochs=1"]), run, log=lambda _: None, overwrite=True)
    assert [json.loads(x)["epoch"] for x in (run / "log.jsonl").read_text().splitlines()] == [1]


def test_a_damaged_log_line_before_the_last_is_an_error_naming_it(tmp_path):
    from zhner.train.rundir import trim_log

    log = tmp_path / "log.jsonl"
    log.write_text('{"epoch": 1}\nnot json\n{"epoch": 2}\n')
    with pytest.raises(ZhnerError) as err:
        trim_log(log, 2, lambda _: None)
    assert str(err.value).startswith(f"{log}:2: not a log record")


def test_a_seed_sets_summary_is_read_bounded_and_written_as_a_new_file(tmp_path):
    """seeds.json / sweep.json: a FIFO or /dev/zero planted there is not read (the summary is rewritten), and a link to
    a file outside is replaced, the file left as it was (atomic_open wrote through links to regular files)."""
    from conftest import deadline
    from zhner.train.runs import _earlier_summaries, _write_json

    os.mkfifo(tmp_path / "seeds.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with deadline(30):
        assert _earlier_summaries(tmp_path / "seeds.json") == {} == _earlier_summaries(tmp_path / "zero.json")
    (tmp_path / "victim.json").write_text("mine")
    (tmp_path / "sweep.json").symlink_to(tmp_path / "victim.json")
    for name in ("seeds.json", "sweep.json"):
        _write_json(tmp_path / name, [{"seed": 42}])
        assert not (tmp_path / name).is_symlink() and _earlier_summaries(tmp_path / name) == {42: {"seed": 42}}
    assert (tmp_path / "victim.json").read_text() == "mine"
