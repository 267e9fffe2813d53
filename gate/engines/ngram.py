"""Prompt-lookup drafting: propose the tokens that followed the latest earlier match of the tail."""

from __future__ import annotations

from collections.abc import Iterable


class NgramDrafter:
    """An append-only token history indexed by its n-grams, for O(1) draft proposals."""

    def __init__(self, tokens: Iterable[int], *, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        # n-gram -> index of the token that followed its latest occurrence.
        self._follow: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append tokens; each n-gram they complete becomes a lookup key for its follower."""
        for token in tokens:
            end = len(self.tokens)
            # The n-grams ending just before this token now have a known continuation.
            for n in range(self.n_min, min(self.n_max, end) + 1):
                self._follow[tuple(self.tokens[end - n : end])] = end
            self.tokens.append(token)

    def propose(self, k: int) -> list[int]:
        """Return up to `k` draft tokens, longest matching n-gram first; [] when none matches."""
        if k <= 0:
            return []
        size = len(self.tokens)
        for n in range(min(self.n_max, size), self.n_min - 1, -1):
            start = self._follow.get(tuple(self.tokens[size - n :]))
            if start is not None:
                return self.tokens[start : start + k]
        return []
