"""The block store: KV blocks packed into large aligned segment objects, with a compact index."""
