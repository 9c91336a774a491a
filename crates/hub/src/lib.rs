//! Fetching the default model into a local cache.
