"""The loops that act: observe both far ends, judge every runner, scale every pool."""
