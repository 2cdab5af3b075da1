"""The shared git workspace with pull requests: the embedded forge (default,
one machine) and the Gitea adapter, both implementing `agensh_ray.seams.Forge`.
Implementations are registered by name (`agensh_ray.services.registry`) and
imported only when chosen."""
