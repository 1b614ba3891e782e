"""One file per block family; each block's forward is written in the shape of its formula."""
