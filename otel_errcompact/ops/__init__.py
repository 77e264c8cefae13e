"""Tools for the people who run agents: error tonnage (is compaction worth it here?) and the trajectory viewer."""
