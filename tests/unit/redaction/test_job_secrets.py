"""Redaction that knows the job's secrets (issue 33, part 2): the values of the environment's secret-named
variables and of secret-looking arguments, scrubbed from every text that leaves (and no ordinary value turned
into <redacted>); multi-line blocks (PEM/PGP keys cut off from their BEGIN line, YAML values on the next
line, split JWTs); Azure, webhook, netrc and mysql formats; torch's store keys kept; the stream redactor the
terminal and agent.stderr.log use; the rank's error.json rewritten redacted."""
from __future__ import annotations

import base64
import json
import random

import pytest

from ddpdoctor.redaction import job_secrets, redact
from ddpdoctor.redaction import REDACTED, Lines, know_job, redact_argv, redact_text

AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
WANDB = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"  # 40 hex characters, like a git SHA: only the value tells
DB = "Tr0ub4dor-3x"
SLACK = "https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/abcdefghijklmnopqrstuvwx"


@pytest.fixture(autouse=True)
def _forget():
    yield
    job_secrets.forget()


def _key_lines(n: int = 20, width: int = 64) -> list[str]:
    body = base64.b64encode(random.Random(7).randbytes(48 * n)).decode()
    return [body[i:i + width] for i in range(0, len(body), width)]


# ---------------------------------------------------------------- the job's environment and arguments
def test_values_of_secret_named_variables_are_scrubbed_wherever_they_stand():
    know_job({"AWS_SECRET_ACCESS_KEY": AWS, "WANDB_API_KEY": WANDB, "DB_PASSWORD": DB, "PATH": "/usr/bin"})
    text = (f"RuntimeError: s3 upload failed (key {AWS}); wandb login {WANDB}\n"
            f"psycopg2.OperationalError: connection to db as admin/{DB} refused\nstep 1 loss 2.5 /usr/bin/python")
    out = redact_text(text)
    for secret in (AWS, WANDB, DB):
        assert secret not in out, out
    assert "s3 upload failed" in out and "connection to db as admin/" in out and "/usr/bin/python" in out


def test_a_url_encoded_secret_and_each_line_of_a_key_held_in_a_variable_are_scrubbed():
    lines = _key_lines(4)
    know_job({"DB_PASSWORD": "p@ss/w0rd!", "SSH_PRIVATE_KEY": "\n".join(lines)})
    out = redact_text(f"postgres://bob:p%40ss%2Fw0rd%21@db/x and body {lines[2]}")
    assert "p%40ss%2Fw0rd%21" not in out and lines[2] not in out


def test_the_process_environment_is_taken_when_not_told(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "c0rrect-h0rse")
    job_secrets.forget()
    assert redact_text("login c0rrect-h0rse failed") == f"login {REDACTED} failed"


@pytest.mark.parametrize("value", ["1", "true", "abc", "0", "yes", "default", "localhost", "123456", "8080",
                                   "secret", "hunter", "/tmp/ssh-XXXX/agent.1", "~/.config/gcloud/creds.json",
                                   "./keyfile"])
def test_values_too_short_or_too_common_never_blank_ordinary_text(value):
    know_job({"SOME_TOKEN": value, "REDIS_AUTH_HOST": value})
    text = f"step 1 true abc 0 yes default localhost 123456 8080 secret hunter {value} /tmp/ssh-XXXX/agent.1"
    assert redact_text(text) == text
    assert not job_secrets.worth_scrubbing(value)


@pytest.mark.parametrize("value", ["hunter2", "p@ss!1", "Tr0ub4dor-3x", "correcthorsebattery"])
def test_values_long_or_mixed_enough_are_worth_scrubbing(value):
    assert job_secrets.worth_scrubbing(value)


def test_secret_arguments_are_stored_redacted_and_scrubbed_from_text():
    argv = ["-k", "Zq8vT3xLp0Wm7Yr2", "-p", "S3cr3t!x", "-pHunter2x", f"--notify={SLACK}",
            "--notify=https://ntfy.example.com/alerts/a1B2c3D4e5F6g7H8i9J0", "-k", "5", "-p", "8080", "-pretrained",
            "-p29500", "-k", "topk"]
    out = redact_argv(argv)
    assert out == ["-k", REDACTED, "-p", REDACTED, f"-p{REDACTED}", f"--notify=https://hooks.slack.com/services/{REDACTED}",
                   f"--notify=https://ntfy.example.com/alerts/{REDACTED}", "-k", "5", "-p", "8080", "-pretrained",
                   "-p29500", "-k", "topk"]
    know_job({}, argv)
    text = f"args: {argv}\nposting to https://ntfy.example.com/alerts/a1B2c3D4e5F6g7H8i9J0 failed"
    shown = redact_text(text)
    for secret in ("Zq8vT3xLp0Wm7Yr2", "S3cr3t!x", "Hunter2x", "T01ABCDEF/B02GHIJKL", "a1B2c3D4e5F6g7H8i9J0"):
        assert secret not in shown, shown
    assert "'8080'" in shown and "'-pretrained'" in shown and "'topk'" in shown


def test_run_trainer_tells_redaction_the_jobs_environment_and_arguments(tmp_path, monkeypatch):
    """launch() hands the job's environment and arguments to know_job before the job starts."""
    from ddpdoctor.launch import run
    from ddpdoctor.launch.config import TrainerConfig

    script = tmp_path / "job.py"
    script.write_text("")
    monkeypatch.setenv("DB_PASSWORD", DB)
    cfg = TrainerConfig(script=str(script), script_args=["-k", "Zq8vT3xLp0Wm7Yr2"], run_dir=str(tmp_path / "r"),
                        run_id="r1", standalone_endpoint="127.0.0.1:1")
    seen = {}
    monkeypatch.setattr(run, "_run_job", lambda cfg, argv, env, *a: seen.update(env=env) or {})
    run.launch(cfg, echo=False)
    assert DB in job_secrets.known() and "Zq8vT3xLp0Wm7Yr2" in job_secrets.known()
    assert seen["env"]["DB_PASSWORD"] == DB  # the job itself gets the real value


# ---------------------------------------------------------------- formats
@pytest.mark.parametrize("text, gone, kept", [
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + "Zm9vYmFy" * 11 + ";EndpointSuffix=core",
     "Zm9vYmFy", "AccountName=acct"),
    ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=QWxhZGRpbjpvcGVu=",
     "QWxhZGRpbjpvcGVu", "SharedAccessKeyName=root"),
    (f"notify failed: POST {SLACK} -> 404", "T01ABCDEF/B02GHIJKL/abcdefghijklmnopqrstuvwx", "hooks.slack.com"),
    ("https://discord.com/api/webhooks/123456789012/AbCdEfGhIjKlMnOpQrStUvWx-yz", "AbCdEfGhIjKlMnOpQrStUvWx",
     "discord.com/api/webhooks/"),
    ("machine api.example.com login bob password s3cr3tPW", "s3cr3tPW", "login bob password"),
    ("machine h\n  login bob\n  password s3cr3tPW\n", "s3cr3tPW", "login bob"),
    ("$ mysql -h db -uroot -pS3cretPw mydb", "S3cretPw", "-uroot"),
    ("mysqldump -pS3cretPw --all-databases > x.sql", "S3cretPw", "--all-databases"),
])
def test_new_formats(text, gone, kept):
    out = redact_text(text)
    assert gone not in out and kept in out and REDACTED in out, out


@pytest.mark.parametrize("text", [
    "RuntimeError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2",
    "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined. "
    "keys: /default_pg/0//cuda//0/1",
    "ssh -p2222 node7; pip install -pre torch; password incorrect for user bob",
    "loading --key-file ./certs/client.key and ssh_key: ~/.ssh/id_ed25519",
    "    raise KeyError(key)\nKeyError: 'labels'",
    "commit 2b6f0cc904d137be2e1730235f5664094b831186 sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
])
def test_store_keys_paths_and_ordinary_lines_stay_readable(text):
    assert redact_text(text) == text


# ---------------------------------------------------------------- multi-line blocks
def test_a_pem_key_whose_begin_line_the_tail_cut_off():
    lines = _key_lines()
    pem = ["-----BEGIN RSA PRIVATE KEY-----", *lines, "AbCd3fGh==", "-----END RSA PRIVATE KEY-----"]
    tail = "\n".join(pem[6:] + ["Traceback (most recent call last):", '  File "x.py", line 3', "KeyError: 'k'"])
    out = redact_text(tail)
    assert not any(line in out for line in lines[5:]) and "AbCd3fGh==" not in out, out
    assert "-----END RSA PRIVATE KEY-----" in out and "KeyError: 'k'" in out


def test_a_tail_of_key_body_lines_without_begin_or_end():
    lines = _key_lines()
    text = "\n".join(["step 3", *lines[4:12], "step 4 sha 2b6f0cc904d137be2e1730235f5664094b831186"])
    out = redact_text(text)
    assert not any(line in out for line in lines[4:12]), out
    assert "step 3" in out and "2b6f0cc904d137be2e1730235f5664094b831186" in out


def test_pgp_private_key_blocks_with_and_without_their_begin_line():
    lines = _key_lines()
    block = ["-----BEGIN PGP PRIVATE KEY BLOCK-----", "Version: GnuPG v2", "", *lines, "=ab12",
             "-----END PGP PRIVATE KEY BLOCK-----"]
    for text in ("\n".join(block), "\n".join(block[10:])):
        out = redact_text(text)
        assert not any(line in out for line in lines) and "=ab12" not in out, out


def test_yaml_password_with_the_value_on_the_next_line():
    text = "db:\n  user: bob\n  password:\n    Hunter2x9\n  host: db1\napi_token: |\n  tok-line-one\n  tok-line-two\nlr: 3"
    out = redact_text(text)
    assert "Hunter2x9" not in out and "tok-line-one" not in out and "tok-line-two" not in out, out
    assert "user: bob" in out and "host: db1" in out and "lr: 3" in out


def test_a_jwt_split_across_lines_at_its_dots():
    parts = ("eyJhbGciOiJIUzI1NiJ9", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
    for text in (f"jwt {parts[0]}.\n{parts[1]}.\n{parts[2]}\nnext", f"jwt {parts[0]}\n.{parts[1]}\n.{parts[2]}\nnext"):
        out = redact_text(text)
        assert parts[1] not in out and parts[2] not in out and "next" in out, out


def test_the_stream_redactor_carries_the_context_a_single_line_lacks():
    """torchrun's output, echoed line by line with its `[default0]:` prefixes: no line sees the one before."""
    lines = _key_lines()
    stream = ["[default0]:-----BEGIN OPENSSH PRIVATE KEY-----", *(f"[default0]:{x}" for x in lines[:3]),
              "[default0]:AbCd3fGh==", "[default0]:-----END OPENSSH PRIVATE KEY-----", "[default0]:password:",
              "[default0]:    Hunter2x9", "[default0]:user: bob", "eyJhbGciOiJIUzI1NiJ9.", "eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
              "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "step 5 loss 1.0"]
    redactor = Lines()
    out = "".join(redactor(line + "\n") for line in stream)
    for secret in (*lines[:3], "AbCd3fGh==", "Hunter2x9", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"):
        assert secret not in out, out
    assert "[default0]:user: bob\n" in out and "step 5 loss 1.0\n" in out and "END OPENSSH PRIVATE KEY" in out
    tail_only = Lines()  # the same key's body with no BEGIN seen: its lines, and the short last one
    out = "".join(tail_only(f"{x}\n") for x in [*lines[5:8], "AbCd3fGh==", "-----END RSA PRIVATE KEY-----", "ok"])
    assert not any(x in out for x in lines[5:8]) and "AbCd3fGh==" not in out and out.endswith("ok\n")


def test_agent_log_and_terminal_pump_scrub_the_jobs_values(tmp_path):
    import io

    from ddpdoctor.launch.run import AgentLog, _pump

    know_job({"DB_PASSWORD": DB})
    log = AgentLog(tmp_path / "agent.stderr.log")
    terminal = io.StringIO()
    _pump(io.StringIO(f"[default0]:RuntimeError: db login {DB}\n[default0]:password:\n[default0]:  Hunter2x9\n"),
          [terminal], logs=[log])
    log.close()
    for text in ((tmp_path / "agent.stderr.log").read_text(), terminal.getvalue()):
        assert DB not in text and "Hunter2x9" not in text and "db login" in text, text


# ---------------------------------------------------------------- error.json copies
def test_the_ranks_error_file_is_rewritten_redacted(tmp_path, monkeypatch):
    """torch's @record file as the bootstrap leaves it: torchrun copies it onward (a parent's error file, its
    failure table) as it stands, so token shapes and the job's values must already be gone."""
    from ddpdoctor.launch import error_file

    err = tmp_path / "error.json"
    message = (f"RuntimeError: hf_abcdefghijklmnopqrstuvwxyz0123 ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123 "
               f"xoxb-1234567890-abcdefghij {DB}")
    err.write_text(json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": f"Traceback\n{message}",
                                                                           "timestamp": "1"}}}))
    monkeypatch.setenv("DB_PASSWORD", DB)
    monkeypatch.setattr("sys.argv", ["job.py", "-k", "Zq8vT3xLp0Wm7Yr2"])
    error_file.redact_error_file(str(err))
    text = err.read_text()
    for secret in ("hf_abcdefghij", "ghp_ABCDEFGHIJ", "xoxb-1234567890", DB):
        assert secret not in text, text
    doc = json.loads(text)
    assert doc["message"]["message"].startswith("RuntimeError: ") and doc["message"]["extraInfo"]["timestamp"] == "1"
    assert "Zq8vT3xLp0Wm7Yr2" in job_secrets.known()


def test_the_docstring_says_why_not_detect_secrets():
    assert "detect-secrets" in redact.__doc__ and "bench_redact.py" in redact.__doc__
    assert "MIN_CHARS" in job_secrets.__doc__ and "NIST" in job_secrets.__doc__


def test_a_message_naming_the_key_format_does_not_blank_what_follows():
    """A BEGIN line with no key after it (an error naming the expected format): the traceback stays."""
    text = ("ValueError: expected -----BEGIN RSA PRIVATE KEY-----\nTraceback (most recent call last):\n"
            '  File "x.py", line 1, in <module>\nKeyError: \'a\'')
    assert redact_text(text) == text
    stream = Lines()
    assert "".join(stream(line) for line in text.splitlines(True)) == text
    lines = _key_lines(2)
    after_body = Lines()  # a key's body line, then ordinary words: only the body goes
    assert "".join(after_body(x + "\n") for x in (lines[0], "Done", "step 3")) == f"{REDACTED}\nDone\nstep 3\n"


def test_a_secret_named_variable_that_holds_a_setting_blanks_nothing():
    know_job({"PIP_KEYRING_PROVIDER": "subprocess", "AUTH_TYPE": "kerberos", "REDIS_AUTH_HOST": "db1.internal",
              "HF_TOKEN_PATH": "tokenfile-v2"})
    text = '  File "/usr/lib/python3.12/subprocess.py", line 9\nkerberos ticket ok on db1.internal (tokenfile-v2)'
    assert redact_text(text) == text
