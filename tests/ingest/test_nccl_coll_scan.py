"""The compiled COLL scan: what it reads from each accepted line shape, that it hands every
other line to the polars parser, and that the reader's whole output is the same with and
without it (random mixes of good, damaged and unrelated lines, blocks cut anywhere)."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import tracekit.ingest.nccl_debug as nccl_debug
from tests.ingest.collective_helpers import read_all
from tracekit.ingest import base, nccl_coll_scan
from tracekit.ingest.base import Source

pytestmark = pytest.mark.skipif(nccl_coll_scan.compiled() is None,
                                reason="no C compiler: only the polars parser runs")

BODY = ("{host}:{pid}:{tid} [{dev}] NCCL INFO {op}: opCount {op_count} sendbuff 0x7f11b4000000 "
        "recvbuff (nil) count {count} datatype {datatype} op 0 root {root} comm {comm} "
        "[nranks={nranks}] stream 0x562f1c2e9d60{suffix}")
INIT = ("{host}:{pid}:19401 [{dev}] NCCL INFO ncclCommInitRankConfig comm {comm} rank {rank} "
        "nranks 16 cudaDev {dev} nvmlDev 0 busId 18000 commId 0xa3b91e07c45d2f68 - Init START")


def coll(prefix="", host="gpu-b04", pid=19230, tid=19231, dev=0, op="AllReduce", op_count="1f",
         count=16777216, datatype=9, root=0, comm="0x55b7e3a81c20", nranks=16, suffix=""):
    return prefix + BODY.format(host=host, pid=pid, tid=tid, dev=dev, op=op, op_count=op_count,
                                count=count, datatype=datatype, root=root, comm=comm,
                                nranks=nranks, suffix=suffix)


def scan(lines: list[str], end: str = "\n") -> nccl_coll_scan.ScannedBlock:
    return nccl_coll_scan.scan(("header" + end + end.join(lines) + end).encode())


def with_texts(scanned: nccl_coll_scan.ScannedBlock) -> pl.DataFrame:
    """The scanned calls with the texts their ``op_id`` and their key's ids index."""
    strings = pl.lit(scanned.strings)
    key = pl.col("key")
    return scanned.calls.with_columns(
        strings.gather(pl.lit(scanned.keys["host_id"]).gather(key)).alias("host"),
        strings.gather(pl.col("op_id")).alias("op_name"),
        strings.gather(pl.lit(scanned.keys["comm_id"]).gather(key)).alias("comm"))


ACCEPTED_PREFIXES = {
    # prefix: (timestamp kind, seconds, zone offset, fraction ns)
    "": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    "12: ": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    "[default7]:": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    # torchrun writes f"[{role}{local_rank}]:" (torch/distributed/elastic/multiprocessing/
    # tail_log.py); torchtitan runs with --role rank; under srun -l the label comes first
    "[rank7]:": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    "7: [rank7]:": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    "[1,8]<stdout>:": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    "(RayTrainWorker pid=615, ip=10.72.7.6) ": (nccl_coll_scan.TS_NONE, 0, 0, 0),
    "[2025-10-14 09:31:07] ": (nccl_coll_scan.TS_LOCAL, 1760434267, 0, 0),
    "8: [2025-10-14 09:31:07.123456] ": (nccl_coll_scan.TS_LOCAL, 1760434267, 0, 123456000),
    "2024-02-29T23:59:59,5Z ": (nccl_coll_scan.TS_ZONED, 1709251199, 0, 500000000),
    "2025-10-14T11:31:08+02:00 ": (nccl_coll_scan.TS_ZONED, 1760441468, 7200, 0),
    "2025-10-14T11:31:08.1234567891-0530 [x]": (nccl_coll_scan.TS_LOCAL, 1760441468, 0,
                                                123456789),
    "1760434269 ": (nccl_coll_scan.TS_EPOCH, 1760434269, 0, 0),
    "[1760434269.000000123] ": (nccl_coll_scan.TS_EPOCH, 1760434269, 0, 123),
}


def test_accepted_shapes_and_their_values():
    prefixes = list(ACCEPTED_PREFIXES)
    lines = [coll(prefix, host=f"h{i}", pid=7 + i) for i, prefix in enumerate(prefixes)]
    lines.append(coll(op="Send", op_count="ABC", count=0, datatype=13, root=-1, dev=123,
                      suffix=" task 5 globalrank 13"))
    scanned = scan(lines, "\r\n")
    calls = with_texts(scanned)
    assert (scanned.lines, calls.height, scanned.rejected) == (len(lines) + 1, len(lines),
                                                                b"header\r\n")
    assert calls["line_index"].to_list() == list(range(1, len(lines) + 1))
    assert calls["host"].to_list()[:3] == ["h0", "h1", "h2"]
    assert calls.select("ts_kind", "ts_seconds", "ts_offset_s", "ts_frac_ns").rows()[:-1] == \
        list(ACCEPTED_PREFIXES.values())
    last = calls.row(-1, named=True)
    assert {k: last[k] for k in ("op_name", "op_count", "count", "datatype", "root", "cuda_dev",
                                 "global_rank", "comm", "pid", "nranks")} == {
        "op_name": "Send", "op_count": 0xABC, "count": 0, "datatype": 13, "root": -1,
        "cuda_dev": 123, "global_rank": 13, "comm": "0x55b7e3a81c20", "pid": 19230,
        "nranks": 16}
    assert calls["global_rank"][0] == nccl_coll_scan.NO_GLOBAL_RANK


@pytest.mark.parametrize("line", [
    coll().replace("opCount 1f", "opCount 1234567890abcdef"),    # opCount beyond 15 hex digits
    coll(pid=1234567890123456789),                                # pid beyond 18 digits
    coll(root=4294967296),                                        # root beyond int32
    coll(prefix="2025-10-14 25:00:00 "),                          # hour out of range
    coll(prefix="2025-02-29 10:00:00 "),                          # not a leap year
    coll(prefix="1850-01-01 10:00:00 "),                          # outside ns datetimes
    coll(prefix="17604342690 "),                                  # 11 digits: not epoch
    coll(prefix="x1760434269 "),                                  # epoch glued to text
    coll(prefix="1760434269.1234567890 "),                        # fraction beyond 9 digits
    coll(prefix="2025/10/14 "),                                   # four digits, no date
    coll(prefix="NCCL version 2.27.3 "),                          # a second NCCL
    coll(host="gpu\u00e9"),                                       # not ASCII
    coll().replace("op 0", "op  0"),                              # double space
    coll().replace("[nranks=16] ", ""),                           # pre-2.19 COLL line
    coll(suffix=" task 5"),                                       # cut RCCL suffix
    coll(suffix=" "),                                             # trailing space
    coll(op="All_Reduce"),                                        # op name not letters
    coll().replace("gpu-b04:19230:19231 [0]", "gpu-b04:19230:19231 [ 0]"),
])
def test_lines_left_to_polars(line):
    scanned = scan([line, coll()])
    assert scanned.calls["line_index"].to_list() == [2]
    assert scanned.rejected_lines.tolist() == [0, 1]


def test_calls_are_keyed_and_numbered_per_comm_in_the_block(monkeypatch):
    """Each call gets its (host, pid, comm, cuda_dev) key and its number among the block's
    calls of its (host, pid, comm); a line bringing a key beyond MAX_KEYS goes to polars."""
    monkeypatch.setattr(nccl_coll_scan, "MAX_KEYS", 4)
    lines = [coll(pid=1), coll(pid=2), coll(pid=1, dev=1), coll(pid=1, comm="0x2"), coll(pid=1),
             coll(pid=3)]
    scanned = scan(lines)
    assert scanned.calls["key"].to_list() == [0, 1, 2, 3, 0]
    assert scanned.calls["call_index"].to_list() == [0, 0, 1, 0, 2]
    assert scanned.keys.select("pid", "cuda_dev", "calls").rows() == [
        (1, 0, 2), (2, 0, 1), (1, 1, 1), (1, 0, 1)]
    comm = "0x55b7e3a81c20"
    assert with_texts(scanned)["comm"].to_list() == [comm, comm, comm, "0x2", comm]
    assert scanned.rejected_lines.tolist() == [0, 6]


def test_calls_beyond_the_keys_read_by_polars_give_the_same_output(monkeypatch):
    """Lines left to polars when the block's keys are full make a block of both parsers'
    calls, numbered by the group-by path: the output is the polars parser's."""
    monkeypatch.setattr(nccl_coll_scan, "MAX_KEYS", 2)
    lines = [INIT.format(host="gpu-b04", pid=pid, comm="0x1", rank=pid, dev=0) for pid in (1, 2, 3)]
    lines += [coll(pid=pid, comm="0x1") for _ in range(3) for pid in (1, 2, 3)]
    assert scan(lines).calls["pid"].unique().sort().to_list() == [1, 2]  # pid 3: polars
    source = Source.from_bytes("keys.log", ("\n".join(lines) + "\n").encode())
    results = []
    for compiled in (True, False):
        monkeypatch.setattr(nccl_debug, "COMPILED_SCAN", compiled)
        results.append(read_all(nccl_debug.NcclDebugReader(), source, {"tz": "UTC"}))
    fast, slow = results
    assert fast.tables["collectives"].select("pid", "seq", "rank").rows() == [
        (pid, seq, pid) for seq in range(3) for pid in (1, 2, 3)]
    for name in fast.tables:
        assert_frame_equal(fast.tables[name], slow.tables[name])


def test_a_block_without_times_or_global_ranks_leaves_their_fields_out():
    """Their fields are written from the block's first call that has one (the rows before it
    filled in: see test_accepted_shapes_and_their_values), else never touched."""
    columns = scan([coll(), coll(prefix="12: ")]).calls.columns
    assert [name for name in nccl_coll_scan.FIELDS if name not in columns] == [
        "ts_seconds", "global_rank", "ts_kind", "ts_offset_s", "ts_frac_ns"]


def test_unterminated_last_line_is_left_to_polars():
    block = (coll() + "\n" + coll() + "\n" + coll()).encode()
    scanned = nccl_coll_scan.scan(block)
    assert scanned.calls["line_index"].to_list() == [0, 1]
    assert scanned.rejected_lines.tolist() == [2]
    assert scanned.rejected == coll().encode()


def test_byte_order_mark_inside_a_block_stays_on_its_line():
    """Only the block's first line loses a byte-order mark, as when polars splits it all."""
    block = (coll() + "\n\ufeff" + INIT.format(host="h", pid=1, comm="0x1", rank=0, dev=0)
             + "\n").encode()
    lines = nccl_debug._split_block(block, 1, "UTC")[3]
    assert lines.rows() == [(2, block.decode().split("\n")[1])]


# -- whole output equal to the polars parser's -----------------------------------------------

HOSTS = ("gpu-b04", "gpu-a17", "n1.cluster,x")
PIDS = (19230, 31170)
COMMS = ("0x55b7e3a81c20", "0x5589f2177d10")
PREFIXES = (*ACCEPTED_PREFIXES, "2025-03-30 02:30:00 ", "2025-10-26 02:30:00 ", "12345 ",
            "2025-13-01 00:00:00 ", "[2025-10-14 09:31:07] 8: ", "abc 1760434269.5 ")

def coll_lines(prefix, pid, dev, op_count, count, root, nranks, suffix):
    return st.builds(
        coll,
        prefix=prefix,
        host=st.sampled_from(HOSTS),
        pid=pid,
        dev=dev,
        op=st.sampled_from(["AllReduce", "Send", "Recv", "Broadcast", "ReduceScatter", "Frob"]),
        op_count=op_count.map(lambda n: format(n, "x")),
        count=count,
        datatype=st.integers(0, 13),
        root=root,
        comm=st.sampled_from(COMMS),
        nranks=nranks,
        suffix=suffix,
    )


good_coll = coll_lines(
    st.sampled_from(PREFIXES), st.sampled_from(PIDS), st.sampled_from([0, 1]),
    st.integers(0, 2**59), st.sampled_from([0, 1, 16777216, 2**62]), st.sampled_from([0, 3, -1]),
    st.sampled_from([16, 8]), st.sampled_from(["", "", " task 5 globalrank 13"]))
ODD_VALUES = {
    "pid": [10**18 + 7, 10**19 - 1], "dev": [10**9, 10**10], "op_count": ["f" * 15, "f" * 16],
    "count": [10**18, 10**19], "root": [2**31 - 1, 2**31, "x"], "nranks": [2**31],
    "suffix": [" task 5 globalrank x", " ", " task 5", " task 5 globalrank 13 x"],
}
"""Values at or beyond what a column holds, or fields the polars parser refuses."""
odd_coll = st.sampled_from([(field, value) for field, values in ODD_VALUES.items()
                            for value in values]).map(lambda odd: coll(**{odd[0]: odd[1]}))
init = st.builds(lambda host, pid, comm, rank: INIT.format(host=host, pid=pid, comm=comm,
                                                           rank=rank, dev=0),
                 st.sampled_from(HOSTS), st.sampled_from(PIDS), st.sampled_from(COMMS),
                 st.integers(0, 15))
other = st.sampled_from([
    "gpu-b04:19230:19500 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via P2P/IPC",
    "gpu-b04:19230:19230 [0] NCCL INFO NCCL version 2.27.3+cuda12.9", "", "Python warning",
    "gpu-b04:19230:19230 [0] NCCL WARN Cuda failure 'out of memory'", "\ufeff" + "x"])


@st.composite
def damaged(draw, line_strategy):
    line = draw(line_strategy)
    at = draw(st.integers(0, len(line)))
    kind = draw(st.sampled_from(["cut", "insert", "delete", "splice"]))
    if kind == "cut":
        return line[:at]
    if kind == "insert":
        return line[:at] + draw(st.sampled_from(
            [" ", "\u00e9", "\t", "\x1f", "NCCL", "0x", "[", "]", ":", "\r", "\ufeff"])) + line[at:]
    if kind == "delete":
        return line[:at] + line[at + 1:]
    return line[:at] + draw(st.sampled_from(["", "2a", "x "])) + draw(line_strategy)


unprefixed_coll = coll_lines(st.just(""), st.sampled_from(PIDS), st.just(0), st.integers(0, 99),
                             st.just(1), st.just(0), st.just(16), st.just(""))


@st.composite
def spliced(draw):
    """A record cut short by another process's whole record, maybe after a torn character
    (which the reader strips from the host by matching hosts of the same pid)."""
    first = draw(st.one_of(good_coll, init))
    second = draw(st.one_of(unprefixed_coll, init))
    return first[:draw(st.integers(len(first) // 2, len(first)))] + draw(
        st.sampled_from(["", "2a", "x"])) + second


any_line = st.one_of(good_coll, good_coll, good_coll, good_coll, odd_coll, init, other,
                     damaged(good_coll), damaged(init), spliced(), st.text(max_size=60),
                     st.one_of(good_coll, init).map(lambda line: "\ufeff" + line))


@settings(max_examples=150, deadline=None)
@given(st.lists(any_line, max_size=40), st.sampled_from(["\n", "\r\n"]), st.booleans(),
       st.integers(64, 3000), st.sampled_from(["UTC", "Europe/Paris"]))
def test_output_equals_the_polars_parser(lines, end, terminated, block_bytes, time_zone):
    """The compiled scan and the polars parser give the same output, blocks cut anywhere and
    split two at a time on the parse threads."""
    text = end.join(line.replace("\n", " ") for line in lines) + (end if terminated else "")
    source = Source.from_bytes("mix.log", text.encode())
    results = []
    for compiled in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(nccl_debug, "COMPILED_SCAN", compiled)
            # blocks cut anywhere, split on the parse threads as a large file's are
            patch.setattr(base, "LINE_BATCH_BYTES", block_bytes)
            results.append(read_all(nccl_debug.NcclDebugReader(), source, {"tz": time_zone}))
    fast, slow = results
    for name in fast.tables:
        assert_frame_equal(fast.tables[name], slow.tables[name])
    assert_frame_equal(fast.quarantine, slow.quarantine)
    assert (fast.lines, fast.skipped, fast.notes) == (slow.lines, slow.skipped, slow.notes)


def test_mix_of_every_shape_is_mostly_scanned():
    """The equivalence test above is not vacuous: most good lines take the compiled path."""
    lines = [coll(prefix, host=host) for prefix in ACCEPTED_PREFIXES for host in HOSTS]
    assert scan(lines).calls.height == len(lines)
    assert with_texts(scan(lines))["host"].n_unique() == len(HOSTS)


def test_without_a_compiler_the_polars_parser_reads_the_same(monkeypatch):
    """Where the C scan cannot be built, :func:`nccl_coll_scan.compiled` is None and every line
    goes to the polars parser: the reader's output is the same."""
    lines = [coll(prefix, host=host) for prefix in ACCEPTED_PREFIXES for host in HOSTS]
    lines += [coll().replace("op 0", "op  0"), coll(suffix=" task 5 globalrank 3"), "other"]
    source = Source.from_bytes("mix.log", ("\n".join(lines) + "\n").encode())
    results = [read_all(nccl_debug.NcclDebugReader(), source, {"tz": "UTC"})]
    monkeypatch.setattr(nccl_coll_scan, "compiled", lambda: None)
    assert nccl_coll_scan.scan(b"x\n") is None
    results.append(read_all(nccl_debug.NcclDebugReader(), source, {"tz": "UTC"}))
    fast, slow = results
    # every call but the double space (quarantined) and "other" (skipped)
    assert (fast.tables["collectives"].height, fast.quarantine.height) == (len(lines) - 2, 1)
    for name in fast.tables:
        assert_frame_equal(fast.tables[name], slow.tables[name])
    assert_frame_equal(fast.quarantine, slow.quarantine)


NAME_COLUMNS = ["host", "comm", "op", "dtype"]


@pytest.mark.parametrize("mixed", [False, True], ids=["scanned-only", "mixed"])
def test_names_come_as_the_sources_codes_with_the_same_values(mixed, monkeypatch):
    """With :attr:`Source.names` Categorical (as the ingest pipeline sets it) the reader gives
    the names it gathers from a block's few texts as those codes: the same values."""
    if mixed:  # pid 3's calls go to the polars parser: a block of both parsers' calls
        monkeypatch.setattr(nccl_coll_scan, "MAX_KEYS", 2)
    lines = [coll(prefix, host=host, pid=pid) for prefix in ACCEPTED_PREFIXES for host in HOSTS
             for pid in (1, 2, 3)]
    text = ("\n".join(lines) + "\n").encode()
    plain = read_all(nccl_debug.NcclDebugReader(), Source.from_bytes("a.log", text), {"tz": "UTC"})
    source = Source.from_bytes("a.log", text)
    source.names = pl.Categorical(pl.Categories.random())
    coded = pl.concat([chunk.tables["collectives"] for chunk in
                       nccl_debug.NcclDebugReader().read(source, {"tz": "UTC"})
                       if "collectives" in chunk.tables])
    assert [column for column, dtype in coded.schema.items() if dtype == source.names] == (
        ["op", "dtype"] if mixed else NAME_COLUMNS)
    assert_frame_equal(coded.with_columns(pl.col(NAME_COLUMNS).cast(pl.String)),
                       plain.tables["collectives"])
