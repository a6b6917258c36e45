"""Counted nouns as a reader writes them: '1 node', '2 nodes', '1 process', '3 processes'."""


def plural(count, noun: str) -> str:
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun}es" if noun.endswith("s") else f"{count} {noun}s"
