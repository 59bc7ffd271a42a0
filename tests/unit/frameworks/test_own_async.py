"""own_async.py's way of observing what a class of yours does through dcp without patching dcp's classes: the
writer, the reader and the Future your code gets are made instances of a subclass with the observer's methods
first (through super()), each one alone; the classes themselves and every other instance stay as they were."""
from concurrent.futures import Future

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from train.frameworks.torch_loop.async_save import ShardDigests, ShardObserver
from train.frameworks.torch_loop.own_async import Awaited, observed


def test_a_writer_and_a_reader_are_observed_one_instance_at_a_time(tmp_path):
    writer, other = FileSystemWriter(str(tmp_path / "a")), FileSystemWriter(str(tmp_path / "b"))
    assert observed(writer, ShardObserver) is writer
    assert isinstance(writer, ShardObserver) and isinstance(writer, FileSystemWriter)
    assert type(writer).write_data is ShardObserver.write_data and type(writer).__mro__[2] is FileSystemWriter
    assert str(writer.path) == str(tmp_path / "a")  # its state kept
    assert type(other) is FileSystemWriter and not isinstance(other, ShardObserver)
    assert type(observed(other, ShardObserver)) is type(writer)  # one subclass a class
    assert type(observed(writer, ShardObserver)) is type(writer)  # observed once
    reader = observed(FileSystemReader(str(tmp_path)), ShardDigests)
    assert type(reader).read_data is ShardDigests.read_data and isinstance(reader, FileSystemReader)


def test_the_future_tells_when_your_code_waits_for_it():
    waits = []
    future = Future()
    future.race_lab_awaited = lambda: waits.append("waited")
    observed(future, Awaited)
    future.add_done_callback(lambda f: waits.append("done"))
    assert waits == []
    future.set_result("metadata")
    assert waits == ["done"]  # resolving it is not waiting for it
    assert future.result() == "metadata" and future.exception() is None
    assert waits == ["done", "waited", "waited"]
