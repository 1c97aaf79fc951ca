"""Provider adapters: one module per upstream kind; they only translate."""
