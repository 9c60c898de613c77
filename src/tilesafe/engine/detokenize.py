"""Streaming detokenization: the text each new token adds, never half a character.

A token can end in the middle of a UTF-8 sequence (an emoji is often two or three byte-level
tokens), and decoding such a prefix gives U+FFFD for the missing bytes. The detokenizer
decodes a short window of recent ids twice — up to the last token it emitted and up to the
new one — and emits the difference only once the window's text no longer ends in U+FFFD;
until then it holds the bytes back. After an emitted, complete character, UTF-8 decoding
starts afresh, so a window starting there decodes exactly as the whole sequence does and the
pieces concatenate to `decode(generated ids)`. `finish()` gives what is still held (bytes
that never completed decode to U+FFFD there, as they do in the final text).

The first window starts inside the prompt (its last few ids), as vLLM's does, so tokenizers
that drop a leading space at the start of a text (SentencePiece) keep the space a
continuation has; for byte-level tokenizers (Qwen3) the context changes nothing. `text` after
`finish()` is the output text to report, so the stream and the final text always agree.
"""
from __future__ import annotations

# Prompt ids kept as context in front of the first generated token.
_CONTEXT = 5
_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """`add(token_id) -> str` the new text; `text` all emitted text; `finish() -> str` the rest."""

    def __init__(self, tokenizer, prompt_ids=(), skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        context = [int(i) for i in list(prompt_ids)[-_CONTEXT:]]
        # A prompt given as ids may end inside a character: then its bytes would join the first
        # generated ones and the stream would differ from decode(generated ids). No context then.
        if self._decode(context).endswith(_REPLACEMENT):
            context = []
        self._ids = context                 # the context, then every generated id
        self._first = len(context)          # where the generated ids start
        self._prefix = 0                    # the window decoded, up to ...
        self._read = len(context)           # ... the last emitted token
        self.text = ""

    @property
    def token_ids(self) -> list[int]:
        return self._ids[self._first:]

    def add(self, token_id: int) -> str:
        """The text `token_id` completes ('' while it ends inside a character)."""
        self._ids.append(int(token_id))
        before = self._decode(self._ids[self._prefix:self._read])
        window = self._decode(self._ids[self._prefix:])
        if len(window) <= len(before) or window.endswith(_REPLACEMENT):
            return ""
        new = window[len(before):]
        self._prefix, self._read = self._read, len(self._ids)
        self.text += new
        return new

    def finish(self) -> str:
        """The text still held back at the end of the stream (U+FFFD for bytes that never
        completed a character); `text` is then the whole output text."""
        before = self._decode(self._ids[self._prefix:self._read])
        rest = self._decode(self._ids[self._prefix:])[len(before):]
        self._prefix = self._read = len(self._ids)
        self.text += rest
        return rest

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens) if ids else ""
