"""View versions: every derived output set has a version, one pointer names the current one."""
