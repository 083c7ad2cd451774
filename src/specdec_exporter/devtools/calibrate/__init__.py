"""The calibrate run: the same seeded load against speculative servers and a plain one."""

from specdec_exporter.devtools.calibrate.runner import (
    CalibrateConfig,
    CalibrateError,
    CalibrationRun,
    run_calibration,
)

__all__ = ["CalibrateConfig", "CalibrateError", "CalibrationRun", "run_calibration"]
