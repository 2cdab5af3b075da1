"""The one append-only log (agensh_ray.applog) and the recovery rule every durable
record of a run shares: a torn tail is cut off, nothing after a bad line is lost,
no sequence number is handed out twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agensh_ray.applog import AppendLog, next_seq, read_new_lines
from agensh_ray.services.chat.embedded import EmbeddedChat
from agensh_ray.services.chat.log import MessageLog
from agensh_ray.services.forge.gitea.webhooks import ForgeEventLog

TORN = b'{"seq":99,"ts":1,"sender":"w001","to":null,"text":"cut in the mid'


def test_torn_tail_is_cut_and_the_next_record_stands_alone(tmp_path):
    p = tmp_path / "log.jsonl"
    with AppendLog(p) as log:
        log.append_many([{"seq": 1}, {"seq": 2}])
    good = p.read_bytes()
    with open(p, "ab") as f:
        f.write(b'{"seq":3,"te')
    log = AppendLog(p)
    assert log.torn_bytes == len(b'{"seq":3,"te') and p.read_bytes() == good
    assert [r["seq"] for r in log.records()] == [1, 2]
    log.append({"seq": 3})
    log.close()
    assert [json.loads(line)["seq"] for line in p.read_bytes().splitlines()] == [1, 2, 3]


def test_a_bad_line_in_the_middle_is_skipped_and_what_follows_is_kept(tmp_path, caplog):
    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"seq":1}\nnot json\n[1,2]\n{"seq":4}\n')
    log = AppendLog(p)
    recs = list(log.records())
    assert [r["seq"] for r in recs] == [1, 4] and log.bad_lines == 2
    assert next_seq(recs) == 5  # numbering continues from the highest, not from a count (3)
    assert "line 2 is unreadable" in caplog.text
    log.close()


def test_a_failed_append_is_rolled_back(tmp_path):
    """A real write failure (the file-size limit, EFBIG) mid-append leaves the file as it was."""
    p = tmp_path / "log.jsonl"
    with AppendLog(p) as log:
        log.append({"seq": 1, "text": "kept"})
    before = p.read_bytes()
    code = textwrap.dedent(f"""
        import resource, signal, sys
        from agensh_ray.applog import AppendLog
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        log = AppendLog({str(p)!r})
        resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 100}, resource.RLIM_INFINITY))
        try:
            log.append({{"seq": 2, "text": "x" * 10000}})
        except OSError as exc:
            print("refused", exc.errno)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        log.append({{"seq": 2, "text": "small"}})
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused")
    assert p.read_bytes() == before + b'{"seq":2,"text":"small"}\n'


def test_read_new_lines_leaves_a_line_still_being_written(tmp_path):
    p = tmp_path / "hook.jsonl"
    assert read_new_lines(p, 0) == ([], 0)
    p.write_bytes(b'{"a":1}\n{"a":2')
    lines, off = read_new_lines(p, 0)
    assert lines == [b'{"a":1}\n'] and off == 8
    with open(p, "ab") as f:
        f.write(b'}\n')
    assert read_new_lines(p, off) == ([b'{"a":2}\n'], 16)


def test_appends_must_be_whole_lines(tmp_path):
    with AppendLog(tmp_path / "x.jsonl") as log, pytest.raises(ValueError, match="whole lines"):
        log.append_bytes(b'{"a":1}')


# -- the defect this log fixes: a torn tail used to swallow the next message and everything after it ----


def test_embedded_chat_survives_a_torn_tail_without_losing_or_reusing_a_message(tmp_path):
    chat = EmbeddedChat(tmp_path)
    for w in ("w001", "w002"):
        chat.add_user(w)
    chat.post("w001", "one")
    chat.dm("w001", "w002", "two")
    chat.post("w002", "three")
    chat.close()
    with open(tmp_path / "chat.jsonl", "ab") as f:
        f.write(TORN)  # the process died mid-append: this message was never acknowledged
    chat = EmbeddedChat(tmp_path)
    assert chat.last_seq == 3
    after = chat.post("w002", "four, written after the crash")
    assert after.seq == 4
    chat.post("w001", "five")
    chat.close()
    chat = EmbeddedChat(tmp_path)  # the next restart
    assert [(m.seq, m.text) for m in chat.messages_since(0)] == [
        (1, "one"), (2, "two"), (3, "three"), (4, "four, written after the crash"), (5, "five")]
    assert [m.seq for m in chat.messages_since(3)] == [4, 5]  # a router's cursor at 3 gets exactly these
    chat.close()


def test_mattermost_message_log_survives_a_torn_tail_and_keeps_post_dedup(tmp_path):
    p = tmp_path / "messages.jsonl"
    log = MessageLog(p)
    assert log.append("w001", None, "hi", ts=1, key="post-a", create_at=1)[1]
    assert not log.append("w001", None, "hi", ts=1, key="post-a", create_at=1)[1]  # seen again on the websocket
    log.close()
    with open(p, "ab") as f:
        f.write(TORN)
    log = MessageLog(p)
    msg, new = log.append("w002", "w001", "after", ts=2, key="post-b", create_at=2)
    assert new and msg.seq == 2
    log.close()
    log = MessageLog(p)
    assert [(m.seq, m.text) for m in log.since(0)] == [(1, "hi"), (2, "after")]
    assert not log.append("w001", None, "hi", ts=1, key="post-a")[1]  # dedup survives the restart
    log.close()


def test_forge_event_log_survives_a_torn_tail(tmp_path):
    p = tmp_path / "events.jsonl"
    log = ForgeEventLog(p)
    log.append("push", "w001", ref="refs/heads/w001/a", delivery="d1")
    log.close()
    with open(p, "ab") as f:
        f.write(b'{"seq":2,"ts":1,"kind":"pu')
    log = ForgeEventLog(p)
    assert log.append("push", "w001", delivery="d1") is None  # a redelivery is still known
    ev = log.append("pr_opened", "w002", pr=2, pr_author="w002", head="w002/b")
    log.close()
    assert ev.seq == 2
    assert [e.seq for e in ForgeEventLog(p).since(0)] == [1, 2]
