"""When the verifier may spend the scheduler's time on a reference prefill.

Two limits, both configurable (config.py: MCINSPECT_VERIFY_SHARE, MCINSPECT_VERIFY_RATE):
- a share of the scheduler's time: a credit that grows by `share` of the wall time that passes
  and shrinks by what each reference took, capped at one second's worth, so over any stretch
  references take at most `share` of it plus one reference; a reference runs when the credit
  covers what a reference of its length is expected to cost (the last cost per token times its
  tokens). Idle turns are charged too: an idle moment can end with a request arriving, which
  then waits for the reference (measured: closed-loop clients lost 15% when idle turns ran free);
- a rate: at most `rate` references a second (a token bucket holding one second's worth).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class VerifyBudget:
    share: float
    rate: float
    _credit: float = 0.0
    _tokens: float = 0.0
    _last: float | None = None
    _seconds_per_token: float = 0.0

    def _accrue(self, now: float) -> None:
        if self._last is None:  # a fresh engine starts with one second's worth of both
            self._last = now
            self._tokens = 1.0
            self._credit = self.share
            return
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._credit = min(self._credit + elapsed * self.share, self.share)
        self._tokens = min(self._tokens + elapsed * self.rate, max(self.rate, 1.0))

    def ready(self, now: float) -> bool:
        """Whether any reference could run now (checked before looking for one: the idle loop
        asks at every turn, and the search reads the tree)."""
        self._accrue(now)
        return self._tokens >= 1.0 and self._credit > 0.0

    def allows(self, now: float, tokens: int) -> bool:
        """Whether a reference of `tokens` tokens may run now."""
        self._accrue(now)
        return self._tokens >= 1.0 and self._credit >= self._seconds_per_token * tokens

    def spent(self, seconds: float, tokens: int) -> None:
        """A reference of `tokens` tokens took `seconds`."""
        self._tokens -= 1.0
        self._credit -= seconds
        if tokens > 0:
            self._seconds_per_token = seconds / tokens
