"""Table.close() and `with Table(...)`: later use is refused, the process detaches."""

import pytest

import flowctrl


def test_close_is_idempotent_and_later_use_is_refused(tmp_path):
    path = tmp_path / "t"
    table = flowctrl.Table(path, capacity=8)
    task = table.task("api", max_concurrency=2)
    permit = task.acquire()
    assert not table.closed
    table.close()
    table.close()
    assert table.closed
    assert "closed" in repr(table)
    for use in (lambda: table.task("api"), table.reap, table.__enter__):
        with pytest.raises(flowctrl.TableClosedError, match="closed"):
            use()
    # Like a closed file: a ValueError, and its description stays readable.
    with pytest.raises(ValueError):
        table.reap()
    assert (table.path, table.capacity, table.max_processes) == (path, 8, 64)
    # Tasks of a closed table refuse use too; only the name stays.
    for use in (
        task.try_acquire,
        task.acquire,
        task.stats,
        task.stats_by_process,
        lambda: task.update(burst=3),
        lambda: task.settings,
    ):
        with pytest.raises(flowctrl.TableClosedError, match='task "api": its table is closed'):
            use()
    assert task.name == "api"
    # A permit taken before the close still gives its concurrency back.
    permit.release()
    assert permit.released
    with flowctrl.Table(path) as again:
        assert again.task("api").stats()["in_flight"] == 0


def test_with_closes_the_table(tmp_path):
    with flowctrl.Table(tmp_path / "t") as table:
        assert isinstance(table, flowctrl.Table) and not table.closed
        task = table.task("api")
        with task.acquire():
            pass
    assert table.closed
    with pytest.raises(flowctrl.TableClosedError):
        task.try_acquire()
    # It closes when the block raises, and lets the exception through.
    with pytest.raises(KeyError):
        with flowctrl.Table(tmp_path / "t") as other:
            raise KeyError("from the block")
    assert other.closed
    with pytest.raises(flowctrl.TableClosedError):
        with other:
            pass


def test_closing_detaches_the_process(tmp_path):
    path = tmp_path / "t"
    first = flowctrl.Table(path, max_processes=1)
    with pytest.raises(flowctrl.TooManyProcessesError):
        flowctrl.Table(path)  # `first` holds the only process slot
    first.close()
    second = flowctrl.Table(path)  # takes the slot `first` gave back
    task = second.task("api")
    permit = task.acquire()
    second.close()
    with pytest.raises(flowctrl.TooManyProcessesError):
        flowctrl.Table(path)  # the task and permit still use the attachment
    del task
    with pytest.raises(flowctrl.TooManyProcessesError):
        flowctrl.Table(path)
    permit.release()
    del permit
    flowctrl.Table(path).close()
