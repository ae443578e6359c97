"""The project as a whole: the house rules, packaging and install, the lessons' shape, the library's voice, the
bad-input sweep, doctests, properties and the torch surface."""
