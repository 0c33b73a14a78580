// The benchmark executable: scenarios land with the transfer-engine issue (see Benchmarks/README.md).
print("attachment-sync-bench: no scenarios yet")
