"""The stand-in's lifecycle: bind, serve on a thread, stop on request."""

from __future__ import annotations

import threading
from pathlib import Path

from .fault_access import checked_fault_token, checked_money_token, new_fault_token
from .faults import FaultInjector, FaultRule
from .server import PaymentsServer, ServerLimits
from .store import Ledger


class PaymentStandin:
    """Bound on construction (so `port` is known at once with port 0); `start()` serves."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: Path | None = None,
        *,
        faults: list[FaultRule] | None = None,
        limits: ServerLimits | None = None,
        log_requests: bool = False,
        allowed_hosts: list[str] | None = None,
        fault_token: str | None = None,
        money_token: str | None = None,
    ) -> None:
        """`allowed_hosts`: `NAME[:PORT]` entries (the bound port when none is given) served
        besides the bound address, `localhost` and `127.0.0.1` with the bound port; a request
        naming any other host is refused (421). `fault_token`: what `/faults` requests must
        send as `Authorization: Bearer` (None: a new random one, see `.fault_token`);
        `money_token` the same for `POST /payments` and `POST /refunds` (`.money_token`)."""
        self.fault_token = checked_fault_token(
            new_fault_token() if fault_token is None else fault_token
        )
        self.money_token = checked_money_token(
            new_fault_token() if money_token is None else money_token
        )
        self.ledger = Ledger(data_dir)
        self.faults = FaultInjector()
        for rule in faults or []:
            self.faults.add(rule)
        try:
            self._server = PaymentsServer(
                (host, port),
                self.ledger,
                self.faults,
                limits or ServerLimits(),
                log_requests,
                self.fault_token,
                allowed_hosts,
                money_token=self.money_token,
            )
        except BaseException:
            self.ledger.close()
            raise
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> PaymentStandin:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut injected delays short, close the ledger. Idempotent."""
        if self._server.stopping.is_set():
            return
        self._server.stopping.set()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self.ledger.close()
