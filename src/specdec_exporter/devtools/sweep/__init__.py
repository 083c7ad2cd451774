"""The sweep experiment: acceptance per temperature, one load phase per temperature."""
