"""Messaging between workers, one task channel and direct messages: the
embedded chat (default) and the Mattermost adapter, both implementing
`agensh_ray.seams.Chat`."""
