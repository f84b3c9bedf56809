"""Rules for the select instruction family (being written)."""

__all__: list[str] = []

# nl-level functions this family adds to nki.language: {name: function}
NL_EXPORTS: dict = {}
