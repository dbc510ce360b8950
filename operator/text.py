"""Text from other programs on its way into a job's status and Events.

Pod and container messages, a Job's failure condition, Kueue's Workload conditions and the API
server's refusals are written by others (a trainer image's own termination, a webhook, a
controller) and are copied into status.message, condition messages and Events, which people read
in a terminal (`kubectl describe`, `kubectl get events`). Control characters there could move
the cursor, rewrite what is shown, forge extra lines or reverse text (bidi overrides), so they are
replaced, once, where the lifecycle writes a message.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with each character that is not printable (C0 and C1 controls, DEL, line and
    paragraph separators, format characters such as bidi overrides, unassigned code points, and
    whitespace other than the space) replaced by a space."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " for c in text)
