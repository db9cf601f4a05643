"""Allocator libraries: what one is and whether it may be preloaded (library), a group's allocator
string resolved to a verified build (resolution, catalog, versions, version_range, debpackage),
what a library knows and does (tunables, options, hardening, hardening_summary, embedded) and
the loader's environment (loaderenv). The entry point is resolution.resolve: an id is asked of
explicit providers (an installed package, the catalog's pinned ids, what registries publish)."""
