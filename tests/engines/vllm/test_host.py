"""The host's RAM and /dev/shm as check reads them."""

from __future__ import annotations

from mmpool_cli.engines.vllm import host


def test_memtotal_is_read_in_kib(tmp_path):
    p = tmp_path / "meminfo"
    p.write_text("MemTotal:       16318208 kB\nMemFree:        1 kB\n")
    assert host.ram_bytes(str(p)) == 16_318_208 * 1024


def test_unreadable_or_odd_meminfo_is_unknown(tmp_path):
    assert host.ram_bytes(str(tmp_path / "missing")) is None
    p = tmp_path / "meminfo"
    p.write_text("MemTotal: lots\n")
    assert host.ram_bytes(str(p)) is None


def test_shm_size_of_a_directory(tmp_path):
    size = host.shm_bytes(str(tmp_path))
    assert size is not None and size > 0
    assert host.shm_bytes(str(tmp_path / "missing")) is None
