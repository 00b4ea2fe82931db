"""What a run produces: the Report and its JSON schema, the Timeline and its analysis,
rendering, and the files written for users' tools (Kineto, Chakra, pictures)."""
