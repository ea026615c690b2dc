"""FluidML's optimizer (docs/DESIGN.md section 1): segmentation, layout DP, voting, loop order and kernel costs."""
