"""A meter provider that stands in for one made later: `run` makes its SDK meter provider, its
readers and their exporters (the metrics SDK, and OTLP's protobuf and HTTP client: about 25 ms
of imports) once its agent has started, not before.

Meters and instruments are asked for as usual. Until `hand_over(provider)`, the measurements
of synchronous instruments are held, in order; at the hand-over every instrument is made on
the real provider (observable ones with their callbacks, which read running totals: nothing
they count is lost) and the held measurements are recorded into it. After it, meters and
instruments are the real provider's, reached through one attribute read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.metrics import (
    CallbackT,
    Counter,
    Histogram,
    Meter,
    MeterProvider,
    NoOpCounter,
    NoOpHistogram,
    NoOpMeter,
    NoOpObservableCounter,
    NoOpObservableGauge,
    NoOpObservableUpDownCounter,
    NoOpUpDownCounter,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.util.types import Attributes

# Measurements held before the hand-over, across all instruments: `run` makes a handful (its
# first phases and pre-start hooks); a provider never handed over must not grow without bound.
MAX_HELD = 100_000

_Held = tuple[float, Attributes, Any]


class MeterProviderLater(MeterProvider):
    """Meters of a provider not made yet (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._real: MeterProvider | None = None
        self._meters: list[_MeterLater] = []
        self.held = 0  # measurements held so far (at most MAX_HELD)
        self.dropped = 0  # measurements past MAX_HELD, never recorded

    @property
    def real(self) -> MeterProvider | None:
        """The provider handed over, once it was."""
        return self._real

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes | None = None,
    ) -> Meter:
        with self._lock:
            if self._real is None:
                meter = _MeterLater(self, name, version, schema_url, attributes)
                self._meters.append(meter)
                return meter
        return self._real.get_meter(name, version, schema_url, attributes)

    def hand_over(self, provider: MeterProvider) -> None:
        """Make every instrument asked for so far on `provider`, record what was held into
        it, and send everything after to it. Once; later calls are ignored."""
        with self._lock:
            if self._real is not None:
                return
            for meter in self._meters:
                meter.hand_over(provider)
            self._meters = []
            self._real = provider

    def hold(
        self, instrument: _SyncLater, amount: float, attributes: Attributes, context: Any
    ) -> bool:
        """Keep a measurement of `instrument` for the hand-over; False when it has happened
        meanwhile (the caller records it into the real instrument)."""
        with self._lock:
            if instrument.real is not None:
                return False
            if self.held >= MAX_HELD:
                self.dropped += 1
            else:
                self.held += 1
                instrument.held.append((amount, attributes, context))
            return True


class _MeterLater(NoOpMeter):
    """A meter whose instruments are made on the real provider at the hand-over."""

    def __init__(
        self,
        provider: MeterProviderLater,
        name: str,
        version: str | None,
        schema_url: str | None,
        attributes: Attributes | None,
    ) -> None:
        super().__init__(name, version=version, schema_url=schema_url)
        self._provider = provider
        self._attributes = attributes
        self._instruments: list[_SyncLater | _ObservableLater] = []
        self._real: Meter | None = None

    def hand_over(self, provider: MeterProvider) -> None:
        """Called with the provider's lock held."""
        meter = provider.get_meter(self.name, self.version, self.schema_url, self._attributes)
        for instrument in self._instruments:
            instrument.make(meter)
        self._instruments = []
        self._real = meter

    def _add(self, instrument: Any) -> Any:
        # An instrument asked of this meter after the hand-over (a library that kept the
        # meter) is made on the real one at once.
        with self._provider._lock:
            if self._real is None:
                self._instruments.append(instrument)
            else:
                instrument.make(self._real)
        return instrument

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        made = _CounterLater(self._provider, "create_counter", name, unit, description, {})
        return self._add(made)  # type: ignore[no-any-return]

    def create_up_down_counter(
        self, name: str, unit: str = "", description: str = ""
    ) -> UpDownCounter:
        made = _UpDownCounterLater(
            self._provider, "create_up_down_counter", name, unit, description, {}
        )
        return self._add(made)  # type: ignore[no-any-return]

    def create_histogram(
        self,
        name: str,
        unit: str = "",
        description: str = "",
        *,
        explicit_bucket_boundaries_advisory: Sequence[float] | None = None,
    ) -> Histogram:
        advisory = {"explicit_bucket_boundaries_advisory": explicit_bucket_boundaries_advisory}
        made = _HistogramLater(
            self._provider, "create_histogram", name, unit, description, advisory
        )
        return self._add(made)  # type: ignore[no-any-return]

    def create_observable_counter(
        self,
        name: str,
        callbacks: Sequence[CallbackT] | None = None,
        unit: str = "",
        description: str = "",
    ) -> ObservableCounter:
        made = _ObservableLater("create_observable_counter", name, callbacks, unit, description)
        self._add(made)
        return NoOpObservableCounter(name, callbacks, unit=unit, description=description)

    def create_observable_up_down_counter(
        self,
        name: str,
        callbacks: Sequence[CallbackT] | None = None,
        unit: str = "",
        description: str = "",
    ) -> ObservableUpDownCounter:
        made = _ObservableLater(
            "create_observable_up_down_counter", name, callbacks, unit, description
        )
        self._add(made)
        return NoOpObservableUpDownCounter(name, callbacks, unit=unit, description=description)

    def create_observable_gauge(
        self,
        name: str,
        callbacks: Sequence[CallbackT] | None = None,
        unit: str = "",
        description: str = "",
    ) -> ObservableGauge:
        made = _ObservableLater("create_observable_gauge", name, callbacks, unit, description)
        self._add(made)
        return NoOpObservableGauge(name, callbacks, unit=unit, description=description)


class _SyncLater:
    """A synchronous instrument made at the hand-over; what it measured before is held."""

    def __init__(
        self,
        provider: MeterProviderLater,
        factory: str,
        name: str,
        unit: str,
        description: str,
        options: dict[str, Any],
    ) -> None:
        super().__init__(name, unit=unit, description=description)  # type: ignore[call-arg]
        self._provider = provider
        self._make_args = (factory, name, unit, description, options)
        self.real: Any = None
        self.held: list[_Held] = []

    def make(self, meter: Meter) -> None:
        factory, name, unit, description, options = self._make_args
        real = getattr(meter, factory)(name, unit=unit, description=description, **options)
        for amount, attributes, context in self.held:
            self._record(real, amount, attributes, context)
        self.held = []
        self.real = real

    def _measure(self, amount: float, attributes: Attributes, context: Any) -> None:
        if self.real is None and self._provider.hold(self, amount, attributes, context):
            return
        self._record(self.real, amount, attributes, context)

    _record: Callable[[Any, float, Attributes, Any], None]


class _AddLater(_SyncLater):
    """A counter or up-down counter: measured with `add`."""

    @staticmethod
    def _record(real: Any, amount: float, attributes: Attributes, context: Any) -> None:
        real.add(amount, attributes, context)

    def add(self, amount: float, attributes: Attributes = None, context: Any = None) -> None:
        self._measure(amount, attributes, context)


class _CounterLater(_AddLater, NoOpCounter):
    pass


class _UpDownCounterLater(_AddLater, NoOpUpDownCounter):
    pass


class _HistogramLater(_SyncLater, NoOpHistogram):
    @staticmethod
    def _record(real: Any, amount: float, attributes: Attributes, context: Any) -> None:
        real.record(amount, attributes, context)

    def record(self, amount: float, attributes: Attributes = None, context: Any = None) -> None:
        self._measure(amount, attributes, context)


class _ObservableLater:
    """An observable instrument made at the hand-over with its callbacks: nothing is called
    before, since no reader exists to collect."""

    def __init__(
        self,
        factory: str,
        name: str,
        callbacks: Sequence[CallbackT] | None,
        unit: str,
        description: str,
    ) -> None:
        self._make_args = (factory, name, callbacks, unit, description)

    def make(self, meter: Meter) -> None:
        factory, name, callbacks, unit, description = self._make_args
        getattr(meter, factory)(name, callbacks, unit=unit, description=description)
