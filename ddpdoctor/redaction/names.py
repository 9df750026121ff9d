"""Which names say they hold a secret (an environment variable, a key in the facts, a flag, a query
parameter), and what a redacted value reads as. The rules every redaction shares (``redact``,
``job_secrets``, ``blocks``), kept apart so that they import no redaction code."""
from __future__ import annotations

import re

REDACTED = "<redacted>"

# Names are compared by segment (split on _ - . and the like), so MONKEYPATCH and TOKENIZERS_PARALLELISM
# keep their values while CUDA_CACHE_KEYFILE, WANDB_API_KEY and --api-key lose theirs.
SEGMENT_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_SECRET_SEGMENT = re.compile(
    r"[A-Z0-9]*TOKEN"  # TOKEN, HFTOKEN, ACCESSTOKEN; not TOKENS_PER_S or TOKENIZERS
    r"|[A-Z0-9]*SECRETS?"
    r"|[A-Z0-9]*(PASSWORD|PASSWD|PASSPHRASE)S?"
    r"|[A-Z0-9]*CREDENTIALS?"
    r"|COOKIES?"
    r"|KEY(S|FILE|RING|TAB|ID|PAIR|STORE|CHAIN)?"
    r"|(API|ACCESS|PRIVATE|SECRET|SIGNING|ENCRYPTION|SSH|GPG|PGP|LICENSE|SESSION|CLIENT|ACCOUNT|STORAGE"
    r"|SHAREDACCESS|MASTER)KEYS?"  # Azure's AccountKey= and SharedAccessKey= in connection strings
    r"|SHAREDACCESSSIGNATURE"
    r"|AUTH|AUTHORIZATION|BEARER"
)
# Names that match the rules above but hold no secret and are useful to compare across nodes.
_NOT_SECRET = {"NCCL_IB_PKEY", "KEY_SIZE", "MONKEYPATCH"}
# Query parameters that carry a credential without saying so by the rules above (Azure SAS, short forms).
QUERY_SECRET = {"SIG", "SIGNATURE", "PWD", "PW", "PASS", "APIKEY"}

# A tokenizer's vocabulary, not a credential: pad_token, eos_token_id, token_type_ids, TOKEN_COUNT.
_VOCAB_BEFORE = {"PAD", "EOS", "BOS", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "ADDITIONAL", "START", "END",
                 "DECODER", "IMAGE", "AUDIO", "VIDEO"}
_VOCAB_AFTER = {"ID", "IDS", "TYPE", "TYPES", "COUNT", "LEN", "LENGTH", "SIZE", "INDEX", "NUM"}


def is_secret_name(name: str) -> bool:
    segments = [seg for seg in SEGMENT_SPLIT.split(name.upper()) if seg]
    if "_".join(segments) in _NOT_SECRET:  # key-size, KEY_SIZE and key.size alike
        return False
    return any(_SECRET_SEGMENT.fullmatch(seg) and not _vocabulary(segments, i) for i, seg in enumerate(segments))


def is_query_secret(name: str) -> bool:
    """A query parameter that signs without saying so by the name rules: sig, X-Amz-Signature, pwd."""
    return bool(QUERY_SECRET.intersection(SEGMENT_SPLIT.split(name.upper())))


def _vocabulary(segments: list[str], i: int) -> bool:
    """TOKEN as a tokenizer's word: eos_token, pad_token_id, token_type_ids (not HF_TOKEN, not TOKEN)."""
    if segments[i] != "TOKEN":
        return False
    return (i > 0 and segments[i - 1] in _VOCAB_BEFORE) or (i + 1 < len(segments) and segments[i + 1] in _VOCAB_AFTER)
