"""FluidML's optimizer (DESIGN.md section 1): segmentation, layout DP, voting, loop order and kernel costs."""
