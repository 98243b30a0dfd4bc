"""filesystem.Filesystem and /files through the SDK's `sandbox.files`, as envd answers them."""

from __future__ import annotations

import asyncio
import os

from conftest import eventually
from e2b import FileType, FilesystemEventType
from e2b.sandbox.filesystem.filesystem import WriteEntry


def test_text_and_bytes_round_trip(sandbox, scratch):
    info = sandbox.files.write(str(scratch / "a.txt"), "héllo")
    assert (info.path, info.name) == (str(scratch / "a.txt"), "a.txt")
    assert sandbox.files.read(str(scratch / "a.txt")) == "héllo"
    data = bytes(range(256)) * 3
    sandbox.files.write(str(scratch / "b.bin"), data)
    assert bytes(sandbox.files.read(str(scratch / "b.bin"), format="bytes")) == data
    assert (scratch / "b.bin").read_bytes() == data


def test_ten_mebibytes_plain_and_gzip(sandbox, scratch):
    data = os.urandom(10 * 1024 * 1024)
    sandbox.files.write(str(scratch / "big"), data)
    assert (scratch / "big").read_bytes() == data
    assert bytes(sandbox.files.read(str(scratch / "big"), format="bytes")) == data
    text = "compressible line\n" * 200_000
    sandbox.files.write(str(scratch / "big.txt"), text, gzip=True)
    assert (scratch / "big.txt").read_text() == text
    assert sandbox.files.read(str(scratch / "big.txt"), gzip=True) == text


def test_streamed_read(sandbox, scratch):
    (scratch / "s").write_bytes(b"x" * 300_000)
    stream = sandbox.files.read(str(scratch / "s"), format="stream")
    assert sum(len(chunk) for chunk in stream) == 300_000


def test_several_files_in_one_upload_with_missing_parents(sandbox, scratch):
    written = sandbox.files.write_files(
        [
            WriteEntry(path=str(scratch / "m/one.txt"), data="1"),
            WriteEntry(path=str(scratch / "m/deep/two.bin"), data=b"2"),
        ]
    )
    assert sorted(w.path for w in written) == [str(scratch / "m/deep/two.bin"), str(scratch / "m/one.txt")]
    assert (scratch / "m/one.txt").read_text() == "1"
    assert (scratch / "m/deep/two.bin").read_bytes() == b"2"


def test_list_make_dir_get_info_exists_rename_remove(sandbox, scratch):
    assert sandbox.files.make_dir(str(scratch / "d/e")) is True
    assert sandbox.files.make_dir(str(scratch / "d/e")) is False, "an existing directory"
    sandbox.files.write(str(scratch / "d/f.txt"), "12345")
    os.symlink(scratch / "d/f.txt", scratch / "d/link")
    listed = {entry.name: entry for entry in sandbox.files.list(str(scratch / "d"))}
    assert set(listed) == {"e", "f.txt", "link"}
    assert listed["e"].type == FileType.DIR
    assert (listed["f.txt"].type, listed["f.txt"].size) == (FileType.FILE, 5)
    assert listed["link"].symlink_target == str(scratch / "d/f.txt")
    deep = sandbox.files.list(str(scratch / "d"), depth=2)
    assert str(scratch / "d/e") in {entry.path for entry in deep}
    info = sandbox.files.get_info(str(scratch / "d/f.txt"))
    assert (info.permissions, info.owner, info.mode) == ("-rw-r--r--", "root", 0o644)
    assert sandbox.files.exists(str(scratch / "d/f.txt")) is True
    assert sandbox.files.exists(str(scratch / "d/nope")) is False
    moved = sandbox.files.rename(str(scratch / "d/f.txt"), str(scratch / "d/new/g.txt"))
    assert moved.path == str(scratch / "d/new/g.txt")
    assert (scratch / "d/new/g.txt").read_text() == "12345"
    sandbox.files.remove(str(scratch / "d"))
    assert not (scratch / "d").exists()
    sandbox.files.remove(str(scratch / "d"))  # a missing path is no error, as in envd


def test_reading_what_is_missing_or_a_directory_fails_clearly(sandbox, scratch):
    from e2b import InvalidArgumentException, NotFoundException

    try:
        sandbox.files.read(str(scratch / "missing"))
        raise AssertionError("read a missing file")
    except NotFoundException:
        pass
    try:
        sandbox.files.read(str(scratch))
        raise AssertionError("read a directory")
    except InvalidArgumentException:
        pass


def test_watch_dir_polling_sees_create_write_chmod_rename_remove(sandbox, scratch):
    handle = sandbox.files.watch_dir(str(scratch))
    (scratch / "w.txt").write_text("x")
    os.chmod(scratch / "w.txt", 0o600)
    os.rename(scratch / "w.txt", scratch / "w2.txt")
    os.remove(scratch / "w2.txt")
    seen: list = []
    eventually(lambda: seen.extend(handle.get_new_events()) or len(seen) >= 5)
    handle.stop()
    kinds = [(event.name, event.type) for event in seen]
    for expected in [
        ("w.txt", FilesystemEventType.CREATE),
        ("w.txt", FilesystemEventType.WRITE),
        ("w.txt", FilesystemEventType.CHMOD),
        ("w.txt", FilesystemEventType.RENAME),
        ("w2.txt", FilesystemEventType.REMOVE),
    ]:
        assert expected in kinds, (expected, kinds)


def test_watch_dir_streaming_recursive(daemon, scratch):
    from e2b import AsyncSandbox

    async def main():
        sandbox = await AsyncSandbox.create(debug=True, sandbox_url=daemon.envd_url)
        (scratch / "sub").mkdir()
        seen = []
        handle = await sandbox.files.watch_dir(str(scratch), on_event=seen.append, recursive=True)
        (scratch / "sub" / "inner.txt").write_text("y")
        for _ in range(100):
            if any(e.name == "sub/inner.txt" for e in seen):
                break
            await asyncio.sleep(0.05)
        await handle.stop()
        return [(e.name, e.type) for e in seen]

    kinds = asyncio.run(main())
    assert ("sub/inner.txt", FilesystemEventType.CREATE) in kinds, kinds
