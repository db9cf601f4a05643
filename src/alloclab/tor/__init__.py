"""The tor-network scenario: a private Tor network on loopback (network), the directory load its
relays serve (dirload) and the signed descriptors of the routers that fill its consensus (routers)."""
