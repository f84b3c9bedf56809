"""The torch bridge (imported lazily; the core never imports torch)."""
