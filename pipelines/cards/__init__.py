"""Card-velocity fraud detection (Dunning & Friedman, Streaming Architecture, ch. 6)."""
