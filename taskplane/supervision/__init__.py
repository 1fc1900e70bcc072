"""taskplane.supervision: OTP-style supervisors on trio (docs/design-rules.md).

Generic: imports only trio, attrs and the standard library, so any actor tree can use
it. The public surface is re-exported here; the modules behind it are:

* :mod:`.policy` -- :class:`RestartType`, :class:`RestartPolicy`, :class:`ChildSpec`,
  :class:`RestartIntensityExceeded`.
* :mod:`.supervisor` -- :func:`supervise`: one child, restarted per its policy.
* :mod:`.reports` -- :class:`CrashReport` and the ``taskplane.supervision`` log events.
"""

from .policy import ChildSpec as ChildSpec
from .policy import RestartIntensityExceeded as RestartIntensityExceeded
from .policy import RestartPolicy as RestartPolicy
from .policy import RestartType as RestartType
from .policy import StartFn as StartFn
from .reports import CRASH_REPORT_BUFFER_SIZE as CRASH_REPORT_BUFFER_SIZE
from .reports import LOGGER_NAME as LOGGER_NAME
from .reports import CrashReport as CrashReport
from .supervisor import supervise as supervise
