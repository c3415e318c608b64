"""One job's pass in the reconciler, composed of small sub-reconcilers over one pass-state
value (:mod:`.runner` says the order; :mod:`.state` holds the value and its helpers)."""
