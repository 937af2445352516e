"""Limits from a config file through the Python face: Table(config=...) and
FLOWCTRL_CONFIG, the file winning over keyword arguments, edits applied while
the table is open, bad files refused with the file, line and key."""

import os
import subprocess
import sys
import time

import pytest

import flowctrl


def save(path, text):
    # As an editor saves: a new file renamed over the old one.
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_file_wins_and_its_edits_arrive(tmp_path):
    conf = tmp_path / "flowctrl.toml"
    save(conf, f'[table]\npath = "{tmp_path / "t"}"\n[tasks.api]\nmax_concurrency = 2\n')
    table = flowctrl.Table("ignored-by-the-file", config=conf)
    assert table.path == tmp_path / "t"
    task = table.task("api", max_concurrency=50, local_rate=1e6, burst=10)
    assert task.settings["max_concurrency"] == 2
    assert task.settings["local_rate"] == 1e6
    permits = [task.try_acquire(), task.try_acquire()]
    assert all(permits)
    assert not task.try_acquire()
    for p in permits:
        p.release()
    save(conf, f'[table]\npath = "{tmp_path / "t"}"\n[tasks.api]\nmax_concurrency = 5\n')
    began = time.monotonic()
    while task.settings["max_concurrency"] != 5:
        assert time.monotonic() - began < 2, "the edit did not arrive"
        time.sleep(0.01)


def test_flowctrl_config_names_the_file(tmp_path):
    conf = tmp_path / "flowctrl.toml"
    save(conf, f'[table]\npath = "{tmp_path / "t"}"\n[tasks.api]\nburst = 7\n')
    code = "import flowctrl; print(flowctrl.Table().task('api').settings['burst'])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FLOWCTRL_CONFIG": str(conf)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "7"


@pytest.mark.parametrize(
    "text, says",
    [
        ("[tasks.api]\nlocal_rat = 5\n", ":2:1"),
        ("[tasks.api]\nlocal_rat = 5\n", "local_rat"),
        ('\n[tasks.api]\nfallback = "maybe"\n', 'tasks."api"'),
        # A cap of 0 is refused at its own position, per task and per key.
        ("[tasks.api]\nmax_concurrency = 0\n", ':2:19: tasks."api".max_concurrency'),
        ("[tasks.api]\nkey_max_concurrency = 0\n", "key_max_concurrency 0 is refused"),
    ],
)
def test_bad_files_are_refused_with_file_line_and_key(tmp_path, text, says):
    conf = tmp_path / "flowctrl.toml"
    save(conf, text)
    with pytest.raises(ValueError) as e:
        flowctrl.Table(tmp_path / "t", config=conf)
    assert str(conf) in str(e.value)
    assert says in str(e.value)
