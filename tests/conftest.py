"""Shared fixtures: the real digits data on CPU, the CLI run in-process, a throwaway PostgreSQL server."""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

os.environ["ROBUST_TUNE_OFFLINE"] = "1"  # tests never download; weights come from files they create
# The suite trains in its own processes, one trial at a time, unless a test asks for workers; the tests of the
# default (a worker per core) clear it.
os.environ["ROBUST_TUNE_WORKERS"] = "1"
# The commands' consoles are made once in this process: with no COLUMNS of the suite's own terminal fixed into
# them, they follow the COLUMNS a test sets.
os.environ.pop("COLUMNS", None)

import pytest
import torch

from cli.main import main
from pipeline.config import DataConfig
from pipeline.data import Dataset, load_dataset
from pipeline.data.paper_splits import MT_POOLS


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return load_dataset(DataConfig(), torch.device("cpu"))


@dataclass(frozen=True)
class PostgresServer:
    """A throwaway PostgreSQL cluster (see `throwaway_postgres`): its port and password, and how to stop
    and start it again."""

    port: int
    password: str
    root: str  # the cluster's folder: its data, log and socket
    binaries: str  # the folder of initdb and pg_ctl
    as_user: tuple[str, ...] = ()  # runs the server's programs as `postgres` when the tests run as root
    durable: bool = False  # commits written before they are acknowledged (else faster, but a crash loses the last)

    def url(self, database: str, password: str | None = None, port: int | None = None) -> str:
        return f"postgresql://postgres:{password or self.password}@127.0.0.1:{port or self.port}/{database}"

    def run(self, *command: str) -> None:
        """One of the server's programs, as the cluster's owner; its output is shown only when it fails."""
        done = subprocess.run([*self.as_user, os.path.join(self.binaries, command[0]), *command[1:]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=self.root)
        if done.returncode != 0:
            log = os.path.join(self.root, "server.log")
            raise RuntimeError(f"{command[0]} failed: {done.stderr}"
                               + (open(log).read() if os.path.exists(log) else ""))

    def start(self) -> None:
        self.run("pg_ctl", "-D", os.path.join(self.root, "data"), "-l", os.path.join(self.root, "server.log"), "-w",
                 "-t", "60", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                 f"-c synchronous_commit={'on' if self.durable else 'off'} -c full_page_writes=off", "start")

    def restart(self) -> None:
        """Restart the server as an administrator would (fast: every connection dropped, open transactions rolled
        back), with the options it was started with."""
        self.run("pg_ctl", "-D", os.path.join(self.root, "data"), "-l", os.path.join(self.root, "server.log"), "-m",
                 "fast", "-w", "-t", "60", "restart")

    def stop(self) -> None:
        """Stop the server at once, its connections dropped, as a crash or a lost machine would."""
        self.run("pg_ctl", "-D", os.path.join(self.root, "data"), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        return os.path.exists(os.path.join(self.root, "data", "postmaster.pid"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_binaries() -> str | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl): on the PATH, or Debian's newest."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return os.path.dirname(on_path)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    return os.path.dirname(found[-1]) if found else None


@contextmanager
def throwaway_postgres(durable: bool = False) -> Iterator[PostgresServer]:
    """A PostgreSQL cluster of its own in a temporary folder, on a free local port, started; stopped and
    removed at the end. Connections over TCP need the password. As root the server's programs run as the
    `postgres` user (PostgreSQL refuses to run as root). `durable`: for a test that stops it as a crash would,
    every acknowledged commit survives, as on a real server (the operating system keeps what was written)."""
    binaries = postgres_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed "
                    "(Debian: apt-get install postgresql)")
    as_user: tuple[str, ...] = ()
    root = tempfile.mkdtemp(prefix="rt-pg-")  # short: the server's socket lives here
    if os.geteuid() == 0:
        import pwd

        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_user = ("runuser", "-u", "postgres", "--")
    password = uuid.uuid4().hex
    with open(os.path.join(root, "password"), "w") as file:
        file.write(password)
    if as_user:
        os.chown(os.path.join(root, "password"), owner.pw_uid, owner.pw_gid)
    server = PostgresServer(free_port(), password, root, binaries, as_user, durable)
    try:
        server.run("initdb", "-D", os.path.join(root, "data"), "-U", "postgres", "--pwfile",
                   os.path.join(root, "password"), "--auth-local", "trust", "--auth-host", "scram-sha-256",
                   "--no-sync", "-E", "UTF8")
        server.start()
        yield server
    finally:
        if server.running():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server():
    """The test run's PostgreSQL server (`throwaway_postgres`), shared by every test that needs one."""
    with throwaway_postgres() as server:
        yield server


def new_database(server: PostgresServer) -> str:
    """A new, empty database on `server`: its postgresql:// URL."""
    import sqlalchemy as sa

    from pipeline.store import database_url

    name = f"test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(database_url(server.url("postgres")), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return server.url(name)


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A new, empty database on the test run's PostgreSQL server: its postgresql:// URL."""
    return new_database(postgres_server)


@pytest.fixture
def cli(capsys):
    """Run `robust-tune ARGS...` in this process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


# Pool sizes of the real raw trees (the design notes, section 5): the fakes have exactly these.
MVTEC_POOLS = {
    "wood": {"good": (247, 19), "color": 8, "combined": 11, "hole": 10, "liquid": 10, "scratch": 21},
    "carpet": {"good": (280, 28), "color": 19, "cut": 17, "hole": 17, "metal_contamination": 17, "thread": 19},
}


def encoded_image(fmt: str, shade: int, size: tuple[int, int] = (8, 8), mode: str = "L") -> bytes:
    """A tiny image of one shade, encoded once and written many times so fake trees are fast to build."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new(mode, size, shade if mode == "L" else (shade, 255 - shade, shade // 2)).save(buffer, format=fmt)
    return buffer.getvalue()


def make_magnetic_tile_tree(root, pools=MT_POOLS, size=(8, 8)):
    """MT_<Class>/Imgs/<stem>.jpg grayscale images with <stem>.png masks, plus files at the root to ignore."""
    mask = encoded_image("PNG", 0, size)
    for k, (name, count) in enumerate(pools.items()):
        folder = root / f"MT_{name}" / "Imgs"
        folder.mkdir(parents=True)
        image = encoded_image("JPEG", 30 + 40 * k, size)
        for i in range(count):
            (folder / f"exp{i % 6}_num_{1000 + i}.jpg").write_bytes(image)
            (folder / f"exp{i % 6}_num_{1000 + i}.png").write_bytes(mask)
    (root / "README.md").write_text("Magnetic tile surface defects\n")
    (root / "extra.jpg").write_bytes(mask)
    return root


def make_mvtec_tree(root, category, pools=None, size=(8, 8)):
    """<category>/train/good, test/<defect> (test/good too) and ground_truth/<defect>/NNN_mask.png."""
    pools = pools or MVTEC_POOLS[category]
    mask = encoded_image("PNG", 255, size)
    n_train_good, n_test_good = pools["good"]
    folders = {("train", "good"): n_train_good, ("test", "good"): n_test_good}
    folders |= {("test", name): count for name, count in pools.items() if name != "good"}
    for k, ((part, name), count) in enumerate(folders.items()):
        folder = root / category / part / name
        folder.mkdir(parents=True)
        image = encoded_image("PNG", 20 + 30 * k if name != "good" else 128, size, mode="RGB")
        for i in range(count):
            (folder / f"{i:03d}.png").write_bytes(image)
            if name != "good":
                (root / category / "ground_truth" / name).mkdir(parents=True, exist_ok=True)
                (root / category / "ground_truth" / name / f"{i:03d}_mask.png").write_bytes(mask)
    (root / "license.txt").write_text("CC BY-NC-SA 4.0\n")
    return root


# ls searching alpha; epochs and lr_head fixed away from their defaults, so inheritance shows.
TUNED_LS = "epochs = 1\nlr_head = 0.05\nalpha = { low = 0.0, high = 0.5 }"


@pytest.fixture(scope="session")
def tuned(tmp_path_factory):
    """A database holding a finished two-trial `ls` study `tiny` (TUNED_LS), shared by the modules that evaluate
    it (never changed by the tests: they copy it); built once per test process, by `robust-tune run` in this
    process, which has torch and Ax loaded already (the CLI in its own process is tested where it matters)."""
    from helpers import study_file

    folder = tmp_path_factory.mktemp("tuned")
    db = folder / "tuned.db"
    with pytest.raises(SystemExit) as done:
        main(["run", str(study_file(folder, "tiny", "ls", TUNED_LS, trials=2)), "--db", str(db), "--device", "cpu",
              "--log-file", str(folder / "ax.log")])
    assert done.value.code == 0
    return db


@pytest.fixture(scope="session")
def mt_root(tmp_path_factory):
    return make_magnetic_tile_tree(tmp_path_factory.mktemp("magnetic-tile"))


@pytest.fixture(scope="session")
def mvtec_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mvtec")
    for category in MVTEC_POOLS:
        make_mvtec_tree(root, category)
    return root


def markdown_rows(out: str) -> list[list[str]]:
    """The body of the Markdown table in `out`, each row as its cells (a set-up is named on its first row)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|---")) + 1
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[start:] if line.startswith("|")]


def texts_off_canvas(picture) -> list[str]:
    """Each visible text of `picture` that does not lie wholly inside its canvas, once drawn as its PNG is saved
    (titles fitted, at SAVE_DPI): a title, label, tick label, legend entry or note cut at the picture's edge."""
    from matplotlib.text import Text

    from pipeline.report.plots import SAVE_DPI

    assert picture.png.startswith(b"\x89PNG")  # fits the titles, as saving does
    figure = picture.figure
    figure.set_dpi(SAVE_DPI)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    canvas = figure.bbox
    undrawn = set()  # the labels of ticks outside the axes' range: matplotlib keeps them but draws none
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if (tick.get_loc() is None
                        or not low - 1e-9 * (high - low) <= tick.get_loc() <= high + 1e-9 * (high - low)):
                    undrawn |= {id(tick.label1), id(tick.label2)}
    off = []
    for text in figure.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or id(text) in undrawn:
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < canvas.x0 - 1 or box.y0 < canvas.y0 - 1 or box.x1 > canvas.x1 + 1 or box.y1 > canvas.y1 + 1:
            off.append(f"{picture.file_name}: {text.get_text()!r} at {box.bounds}, canvas {canvas.bounds}")
    return off


def overlapping_texts(picture) -> list[str]:
    """Each pair of visible texts of `picture` that overlap once drawn as its PNG is saved: tick labels that run
    together ("ankle_bootbag"), a label drawn over another."""
    from matplotlib.text import Text

    texts_off_canvas(picture)  # draws it as saved
    figure = picture.figure
    renderer = figure.canvas.get_renderer()
    boxes = []
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            low, high = sorted(axis.get_view_interval())
            shown = [t for t in axis.get_major_ticks() if t.get_loc() is not None and low <= t.get_loc() <= high]
            boxes += [(t.label1, t.label1.get_window_extent(renderer)) for t in shown if t.label1.get_visible()]
    ticks = {id(text) for text, _ in boxes}
    boxes += [(text, text.get_window_extent(renderer)) for text in figure.findobj(Text)
              if id(text) not in ticks and text.get_visible() and text.get_text().strip()
              and not any(text is t.label1 or text is t.label2 for a in figure.axes for axis in (a.xaxis, a.yaxis)
                          for t in axis.get_major_ticks() + axis.get_minor_ticks())]
    found = []
    for i, (first, a) in enumerate(boxes):
        for second, b in boxes[i + 1:]:
            if min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1:
                found.append(f"{picture.file_name}: {first.get_text()!r} over {second.get_text()!r}")
    return found
