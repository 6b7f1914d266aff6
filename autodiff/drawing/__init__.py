"""Drawing graphs: forward and gradient graphs side by side, the reverse pass step by
step, the renderers (Graphviz's ``dot`` or WebAssembly) and the lecturer's command line."""
