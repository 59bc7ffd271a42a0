"""An event log that keeps what it is given in memory, for the fixes' and adapters' code run in a test's process."""


class Events:
    def __init__(self):
        self.recorded = []

    def record(self, event, **fields):
        self.recorded.append({"event": event, **fields})

    def of(self, name):
        return [e for e in self.recorded if e["event"] == name]

    def syncs(self):
        return [(e["event"], e["how"]) for e in self.recorded]
